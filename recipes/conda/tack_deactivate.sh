# conda deactivation of tack: give TACK_CACHE_BUNDLES back the value it had before activation,
# or unset it if it was unset.  Without a matching activation, nothing changes.
_tack_tag="$(printf '%s' "${CONDA_PREFIX}" | cksum | cut -d' ' -f1)"
_tack_saved="$(eval "printf '%s' \"\${_TACK_CONDA_${_tack_tag}_SAVED-}\"")"
case "${_tack_saved}" in
    set:*) export TACK_CACHE_BUNDLES="${_tack_saved#set:}" ;;
    unset) unset TACK_CACHE_BUNDLES ;;
esac
if [ -n "${_tack_saved}" ]; then unset "_TACK_CONDA_${_tack_tag}_SAVED"; fi
unset _tack_tag _tack_saved
