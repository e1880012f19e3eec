"""Secret settings (API keys, flag tokens, the signing key): their environment value, else the
SSM parameter or Secrets Manager secret a deployment names. Loaded through Powertools'
parameters utility, imported only when a parameter is actually read."""

from __future__ import annotations

from headwater.errors import ConfigurationError
from headwater.settings import Settings


def load_api_keys(settings: Settings, parameter_name: str | None) -> str:
    """TOPICS_API_KEYS wins; on Lambda the keys come from SSM / Secrets Manager by name (a
    deployment that names a keys parameter never silently serves without auth)."""
    return load_secret(settings.api_keys_raw, parameter_name, "API keys")


def load_secret(value: str, parameter_name: str | None, what: str) -> str:
    """A secret setting: its env value, else (on Lambda) the SSM parameter or Secrets Manager
    secret (`secret:<name>`) it names."""
    if value or not parameter_name:
        return value
    from aws_lambda_powertools.utilities import parameters

    if parameter_name.startswith("secret:"):
        got = parameters.get_secret(parameter_name.removeprefix("secret:"), max_age=300)
    else:
        got = parameters.get_parameter(parameter_name, decrypt=True, max_age=300)
    text = str(got or "").strip()
    if not text:
        raise ConfigurationError(f"{what} parameter {parameter_name!r} is empty")
    return text
