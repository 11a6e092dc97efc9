"""The host hands a component the running extension it names, in the role the component
reads it in (an authenticator, a storage), or says why it cannot."""

from __future__ import annotations

import pytest

from spanscore.core.auth import ClientAuthenticator, ServerAuthenticator
from spanscore.core.component import Host
from spanscore.core.sending_storage import SendingStorages
from spanscore.extensions.bearer_token_auth import BearerTokenAuth, BearerTokenAuthConfig
from spanscore.extensions.file_storage import FileStorage, FileStorageConfig


def test_an_extension_is_handed_over_in_each_role_it_plays(tmp_path):
    auth = BearerTokenAuth("bearertokenauth", BearerTokenAuthConfig(token="t0k3n"))
    storage = FileStorage("file_storage", FileStorageConfig(directory=tmp_path))
    host = Host({"bearertokenauth": auth, "file_storage": storage})
    assert host.extension("bearertokenauth", ServerAuthenticator) is auth
    assert host.extension("bearertokenauth", ClientAuthenticator) is auth
    assert host.extension("file_storage", SendingStorages) is storage


def test_an_extension_not_running_or_not_in_the_role_asked_is_a_lookup_error(tmp_path):
    host = Host({"file_storage": FileStorage("file_storage", FileStorageConfig(directory=tmp_path))})
    with pytest.raises(LookupError, match="extension 'bearertokenauth' is not running"):
        host.extension("bearertokenauth", ServerAuthenticator)
    with pytest.raises(LookupError, match="extension 'file_storage' is not a ServerAuthenticator"):
        host.extension("file_storage", ServerAuthenticator)
