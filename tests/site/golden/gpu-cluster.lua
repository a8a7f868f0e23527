-- -*- lua -*-
-- tack/1.0: rendered by `python -m tack.site modules` from the site config gpu-cluster.yaml.
-- Edit the site config and render again: changes made here are lost.

help([[
Tack compiles Python kernels for CPUs and GPUs and keeps what it compiles
on disk. Your cache is in $SCRATCH/$USER/tack-cache; the site's bundles
for each node type are in /apps/tack/0.1.0/bundles.
Docs: https://tack.example.org
]])

whatis("Tack: Python kernels for CPUs and GPUs, with an on-disk kernel cache")

conflict("tack-dev")
prereq("openmpi")

-- $NAME references are expanded here, when the module is loaded, for the
-- user who loads it; loading fails if one is unset or empty.
if (mode() == "load") then
  if ((os.getenv("SCRATCH") or "") == "") then
    LmodError("tack/1.0: $SCRATCH is unset or empty; TACK_CACHE_DIR is made from it")
  end
  if ((os.getenv("USER") or "") == "") then
    LmodError("tack/1.0: $USER is unset or empty; TACK_CACHE_DIR is made from it")
  end
end

-- pushenv: unloading restores the value each variable had before loading.
-- prepend_path: a list of directories goes before the user's own, and comes off at unload.
pushenv("TACK_CACHE_DIR", (os.getenv("SCRATCH") or "") .. "/" .. (os.getenv("USER") or "") .. "/tack-cache")
pushenv("TACK_CACHE", "write")
pushenv("TACK_CACHE_MPI", "bundle")
pushenv("TACK_CACHE_SIZE", "4G")
prepend_path("TACK_CACHE_BUNDLES", "/apps/tack/0.1.0/bundles")
