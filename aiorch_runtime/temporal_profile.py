"""The Temporal connection settings, derived from a ``temporalio.envconfig`` profile.

``aiorch_runtime.config`` (the only code that reads the environment) hands these functions the
environment as a mapping; they load the profile the Temporal CLI's way (a TOML file, the
``TEMPORAL_*`` variables over it), read the certificate and key files it names once, and say in
one line what is wrong when something is. The result, `TemporalTls`, holds no secret in its
repr.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretBytes
from temporalio.envconfig import ClientConfigProfile, ClientConfigTLS, DataSource
from temporalio.service import TLSConfig

from aiorch_runtime.errors import ConfigError


class TemporalTls(BaseModel):
    """TLS to the Temporal frontend, as the profile and the ``TEMPORAL_TLS*`` variables say.

    Certificates and the key are held as bytes (read once at start); an empty model means TLS
    with the system's root certificates and no client certificate (Temporal Cloud with an API
    key). Nothing here shows in a repr.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    server_name: str | None = None
    server_ca_cert: bytes | None = Field(default=None, repr=False)
    client_cert: bytes | None = Field(default=None, repr=False)
    client_key: SecretBytes | None = None

    @property
    def mutual(self) -> bool:
        """True when the client presents a certificate (mTLS)."""
        return self.client_cert is not None

    def to_tls_config(self) -> TLSConfig:
        """The SDK's TLS options for ``Client.connect``."""
        return TLSConfig(
            domain=self.server_name,
            server_root_ca_cert=self.server_ca_cert,
            client_cert=self.client_cert,
            client_private_key=(
                self.client_key.get_secret_value() if self.client_key is not None else None
            ),
        )


def load_temporal_profile(
    profile: str | None, config_file: Path | None, *, environ: Mapping[str, str]
) -> ClientConfigProfile:
    """The Temporal connection profile as ``temporalio.envconfig`` reads it: ``profile`` (else
    ``TEMPORAL_PROFILE``, else ``default``) from ``config_file`` (else ``TEMPORAL_CONFIG_FILE``,
    else the CLI's default file, if any), overridden by the ``TEMPORAL_*`` variables.

    Raises:
        ConfigError: the file named does not exist or does not parse, or it has no such profile.
    """
    if config_file is not None and not config_file.is_file():
        raise ConfigError(f"TEMPORAL_CONFIG_FILE={str(config_file)!r}: no such file")
    try:
        return ClientConfigProfile.load(
            profile=profile, config_source=config_file, override_env_vars=environ
        )
    except RuntimeError as err:  # the SDK's envconfig error (a RuntimeError, one per cause)
        reason = " ".join(str(err).split()) or type(err).__name__
        raise ConfigError(f"Temporal connection profile: {reason}") from None


def _tls_bytes(source: DataSource | None, what: str) -> bytes | None:
    """A certificate or key given by path (read now) or inline (as is)."""
    if source is None or isinstance(source, bytes):
        return source
    if isinstance(source, str):
        return source.encode()
    try:
        return source.read_bytes()
    except OSError as err:
        raise ConfigError(f"{what} {str(source)!r}: cannot read it ({err.strerror})") from None


def temporal_tls(tls: ClientConfigTLS | None, *, api_key: bool) -> TemporalTls | None:
    """TLS settings from a profile's ``tls`` section, by envconfig's rules: any TLS setting
    turns TLS on, an API key alone turns it on with the system's roots, ``TEMPORAL_TLS=false``
    (``disabled``) turns it off.

    Raises:
        ConfigError: a certificate or key file cannot be read, or a client certificate comes
            without its key (or the key without its certificate).
    """
    if tls is None:
        return TemporalTls() if api_key else None
    if tls.disabled:
        return None
    cert = _tls_bytes(tls.client_cert, "TLS client certificate (TEMPORAL_TLS_CLIENT_CERT_PATH)")
    key = _tls_bytes(tls.client_private_key, "TLS client key (TEMPORAL_TLS_CLIENT_KEY_PATH)")
    if (cert is None) != (key is None):
        given, missing = ("certificate", "key") if key is None else ("key", "certificate")
        raise ConfigError(
            f"a TLS client {given} needs its {missing}: set TEMPORAL_TLS_CLIENT_CERT_PATH and "
            "TEMPORAL_TLS_CLIENT_KEY_PATH (or the profile's client_cert/client_key) together"
        )
    return TemporalTls(
        server_name=tls.server_name,
        server_ca_cert=_tls_bytes(
            tls.server_root_ca_cert, "TLS server CA certificate (TEMPORAL_TLS_SERVER_CA_CERT_PATH)"
        ),
        client_cert=cert,
        client_key=None if key is None else SecretBytes(key),
    )
