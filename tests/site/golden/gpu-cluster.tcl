#%Module1.0
## tack/1.0: rendered by `python -m tack.site modules` from the site config gpu-cluster.yaml.
## Edit the site config and render again: changes made here are lost.

proc ModulesHelp { } {
    puts stderr "Tack compiles Python kernels for CPUs and GPUs and keeps what it compiles
on disk. Your cache is in \$SCRATCH/\$USER/tack-cache; the site's bundles
for each node type are in /apps/tack/0.1.0/bundles.
Docs: https://tack.example.org"
}

module-whatis "Tack: Python kernels for CPUs and GPUs, with an on-disk kernel cache"

## One version at a time, as Lmod keeps one module of a name: loading a second
## would put two installs' bundle directories in TACK_CACHE_BUNDLES.
conflict tack
conflict tack-dev
prereq openmpi

## $NAME references are expanded here, when the module is loaded, for the
## user who loads it; loading fails if one is unset or empty.
if {[module-info mode load]} {
    if {![info exists ::env(SCRATCH)] || $::env(SCRATCH) eq ""} {
        puts stderr "tack/1.0: \$SCRATCH is unset or empty; TACK_CACHE_DIR is made from it"
        break
    }
    if {![info exists ::env(USER)] || $::env(USER) eq ""} {
        puts stderr "tack/1.0: \$USER is unset or empty; TACK_CACHE_DIR is made from it"
        break
    }
}

## pushenv: unloading restores the value each variable had before loading.
## prepend-path: a list of directories goes before the user's own, and comes off at unload.
pushenv TACK_CACHE_DIR "[getenv SCRATCH {}]/[getenv USER {}]/tack-cache"
pushenv TACK_CACHE "write"
pushenv TACK_CACHE_MPI "bundle"
pushenv TACK_CACHE_SIZE "4G"
prepend-path TACK_CACHE_BUNDLES "/apps/tack/0.1.0/bundles"
