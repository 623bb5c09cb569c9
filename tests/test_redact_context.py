"""Token shapes without a fixed prefix (issue 24, item 6): Datadog API and application keys (32
and 40 hex), Comet, ClearML and MLflow tokens, older ModelScope tokens (a bare UUID) are
redacted where their context says secret (a key or variable name, a flag, an Authorization
header, the tools' config files and SDK calls), and only there: under a neutral name they look
like any hash, and git hashes and fingerprints must survive (docs/security.md, "Limits")."""

from __future__ import annotations

import random
import string
import uuid

import pytest

from dsdoctor.redact import redact_text

_RNG = random.Random(2024)
HEX32 = "".join(_RNG.choice("0123456789abcdef") for _ in range(32))
HEX40 = "".join(_RNG.choice("0123456789abcdef") for _ in range(40))
COMET = "".join(_RNG.choice(string.ascii_letters + string.digits) for _ in range(25))
CLEARML_KEY = "".join(_RNG.choice(string.ascii_uppercase + string.digits) for _ in range(20))
CLEARML_SECRET = "".join(_RNG.choice(string.ascii_letters + string.digits) for _ in range(50))
MS_UUID = str(uuid.UUID(int=_RNG.getrandbits(128), version=4))

SECRET_CONTEXTS = [
    (f"DD_API_KEY={HEX32}", HEX32),
    (f"export DD_APP_KEY={HEX40}", HEX40),
    (f'curl -H "DD-API-KEY: {HEX32}" -H "DD-APPLICATION-KEY: {HEX40}"', HEX32),
    (f'curl -H "DD-API-KEY: {HEX32}" -H "DD-APPLICATION-KEY: {HEX40}"', HEX40),
    (f'datadog.initialize(api_key="{HEX32}", app_key="{HEX40}")', HEX40),
    (f"api_key: {HEX32}\nsite: datadoghq.com", HEX32),  # datadog.yaml
    (f"--api-key {HEX32}", HEX32),
    (f"Authorization: Bearer {HEX32}", HEX32),
    (f'comet_ml.init(api_key="{COMET}")', COMET),
    (f"[comet]\napi_key = {COMET}\n", COMET),  # ~/.comet.config
    (f"COMET_API_KEY={COMET} python train.py", COMET),
    (f'api {{ credentials {{ "access_key" = "{CLEARML_KEY}", "secret_key" = "{CLEARML_SECRET}" }} }}',
     CLEARML_KEY),  # clearml.conf
    (f'Task.set_credentials(api_host="https://api.clear.ml", key="{CLEARML_KEY}", '
     f'secret="{CLEARML_SECRET}")', CLEARML_KEY),
    (f"CLEARML_API_SECRET_KEY={CLEARML_SECRET}", CLEARML_SECRET),
    (f"MLFLOW_TRACKING_TOKEN={HEX32}", HEX32),
    (f"MLFLOW_TRACKING_PASSWORD={COMET}", COMET),
    (f"MODELSCOPE_API_TOKEN={MS_UUID}", MS_UUID),
    (f'{{"AccessToken": "{MS_UUID}"}}', MS_UUID),
    (f'api = HubApi()\napi.login("{MS_UUID}")', MS_UUID),
    (f"HubApi().login(access_token='{MS_UUID}')", MS_UUID),
    (f"hub token ms-{MS_UUID} rejected", MS_UUID),  # the current shape: found anywhere
]


@pytest.mark.parametrize("text,secret", SECRET_CONTEXTS)
def test_a_shapeless_token_goes_where_its_context_says_secret(text: str, secret: str) -> None:
    assert secret not in redact_text(text)


@pytest.mark.parametrize("text", [
    f"commit {HEX40} (HEAD -> main)",
    f"git rev-parse HEAD: {HEX40}",
    f"md5 {HEX32}  model.safetensors",
    f"checkpoint fingerprint {HEX32}",
    f'{{"x": "{HEX32}"}}',  # the documented limit: a neutral name says nothing
    f"run_id: {MS_UUID}",
    f"trace id {MS_UUID}",
    "monkey_key = 3",
])
def test_hashes_fingerprints_and_neutral_names_stay(text: str) -> None:
    assert redact_text(text) == text
