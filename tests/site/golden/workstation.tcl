#%Module1.0
## tack/1.0: rendered by `python -m tack.site modules` from the site config workstation.yaml.
## Edit the site config and render again: changes made here are lost.

proc ModulesHelp { } {
    puts stderr "Tack compiles Python kernels and caches them in \$HOME/.cache/tack."
}

module-whatis "Tack kernel compiler"

## One version at a time, as Lmod keeps one module of a name: loading a second
## would put two installs' bundle directories in TACK_CACHE_BUNDLES.
conflict tack

## $NAME references are expanded here, when the module is loaded, for the
## user who loads it; loading fails if one is unset or empty.
if {[module-info mode load]} {
    if {![info exists ::env(HOME)] || $::env(HOME) eq ""} {
        puts stderr "tack/1.0: \$HOME is unset or empty; TACK_CACHE_DIR is made from it"
        break
    }
}

## pushenv: unloading restores the value each variable had before loading.
pushenv TACK_CACHE_DIR "[getenv HOME {}]/.cache/tack"
pushenv TACK_CACHE "write"
pushenv TACK_CACHE_SIZE "2G"
