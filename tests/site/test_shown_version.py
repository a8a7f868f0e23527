"""The site tool prints a checkout's version as the cache commands do: 12 hex digits of its
source hash, not 64 (issue 22); keys keep the whole id."""

import io
import re

from tack.cache.keys import shown_version, tack_version_id
from tack.site.build import bundles_status


def test_bundles_status_shows_the_short_version(tmp_path):
    out = io.StringIO()
    bundles_status(str(tmp_path), out=out)
    text = out.getvalue()
    assert f"Tack {shown_version(tack_version_id())}" in text, text
    if "+src." in tack_version_id():                 # a checkout: the whole id is not shown
        assert tack_version_id() not in text
        assert re.search(r"\+src\.[0-9a-f]{12}\b", text), text
