-- -*- lua -*-
-- tack/1.0: rendered by `python -m tack.site modules` from the site config workstation.yaml.
-- Edit the site config and render again: changes made here are lost.

help([[
Tack compiles Python kernels and caches them in $HOME/.cache/tack.
]])

whatis("Tack kernel compiler")

-- $NAME references are expanded here, when the module is loaded, for the
-- user who loads it; loading fails if one is unset or empty.
if (mode() == "load") then
  if ((os.getenv("HOME") or "") == "") then
    LmodError("tack/1.0: $HOME is unset or empty; TACK_CACHE_DIR is made from it")
  end
end

-- pushenv: unloading restores the value each variable had before loading.
pushenv("TACK_CACHE_DIR", (os.getenv("HOME") or "") .. "/.cache/tack")
pushenv("TACK_CACHE", "write")
pushenv("TACK_CACHE_SIZE", "2G")
