# conda activation of tack: point TACK_CACHE_BUNDLES at this environment's kernel bundles.
# The value the variable had (or that it was unset) is saved under a name of this environment's
# own, so that stacked environments each restore theirs; activating twice saves nothing new.
_tack_tag="$(printf '%s' "${CONDA_PREFIX}" | cksum | cut -d' ' -f1)"
if [ -z "$(eval "printf '%s' \"\${_TACK_CONDA_${_tack_tag}_SAVED+x}\"")" ]; then
    if [ -n "${TACK_CACHE_BUNDLES+x}" ]; then
        eval "export _TACK_CONDA_${_tack_tag}_SAVED=\"set:\${TACK_CACHE_BUNDLES}\""
    else
        eval "export _TACK_CONDA_${_tack_tag}_SAVED=unset"
    fi
    # This environment's bundles first; a directory of the user's own stays after them.
    export TACK_CACHE_BUNDLES="${CONDA_PREFIX}/share/tack/bundles${TACK_CACHE_BUNDLES:+:${TACK_CACHE_BUNDLES}}"
fi
unset _tack_tag
