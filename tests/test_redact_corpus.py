"""Current token shapes (issue 24, item 6), generated at run time from the providers' documented
formats (prefix, alphabet, length; random bodies, never a real secret), planted in logs, configs
and the environment, in plain text, under a neutral key, base64-wrapped and hard-wrapped: no
output of analyze, report, watch --plain or env prints one."""

from __future__ import annotations

import base64
import json
import os
import random
import string
import subprocess
import sys
from pathlib import Path

import pytest
from test_redact_formats import leaked
from test_redact_outputs import LAUNCHER, _run

from dsdoctor.facts.envinfo import relevant_env
from dsdoctor.redact import redact_text

_RNG = random.Random(24)
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URL = ALNUM + "_-"


def _r(alphabet: str, n: int) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


def _b64url(obj: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")


def _jwt() -> str:
    head = _b64url({"alg": "RS256", "kid": _r(URL, 20)})
    body = _b64url({"iss": "kubernetes/serviceaccount", "sub": "system:serviceaccount:ml:" + _r(ALNUM, 8)})
    return f"{head}.{body}.{_r(URL, 86)}"


def _pem(kind: str) -> str:
    lines = [_r(B64, 64) for _ in range(6)]
    return f"-----BEGIN {kind}PRIVATE KEY-----\n" + "\n".join(lines) + f"\n-----END {kind}PRIVATE KEY-----"


def corpus() -> dict[str, tuple[str, str]]:
    """shape -> (planted text, the secret in it). Shapes from the providers' documentation."""
    u = _r(HEX, 8) + "-" + _r(HEX, 4) + "-4" + _r(HEX, 3) + "-a" + _r(HEX, 3) + "-" + _r(HEX, 12)
    twilio = _r(HEX, 32)
    aws_session = "IQoJb3JpZ2luX2Vj" + _r(B64, 300)
    acct_key = _r(B64, 86) + "=="
    c = {
        "github-classic": "ghp_" + _r(ALNUM, 36),
        "github-oauth": "gho_" + _r(ALNUM, 36),
        "github-fine-grained": "github_pat_" + _r(ALNUM, 22) + "_" + _r(ALNUM, 59),
        "openai-project": "sk-proj-" + _r(URL, 74) + "T3BlbkFJ" + _r(URL, 74),
        "openai-service-account": "sk-svcacct-" + _r(URL, 74) + "T3BlbkFJ" + _r(URL, 74),
        "anthropic": "sk-ant-api03-" + _r(URL, 93) + "AA",
        "huggingface": "hf_" + _r(string.ascii_letters, 34),
        "slack-bot": "xoxb-" + _r(string.digits, 12) + "-" + _r(string.digits, 13) + "-" + _r(ALNUM, 24),
        "stripe-live": "sk_live_" + _r(ALNUM, 99),
        "google-api": "AIza" + _r(URL, 35),
        "jwt-kubernetes": _jwt(),
        "databricks": "dapi" + _r(HEX, 32),
        "npm": "npm_" + _r(ALNUM, 36),
        "pypi": "pypi-AgEIcHlwaS5vcmc" + _r(URL, 70),
        "gitlab": "glpat-" + _r(URL, 20),
        "docker-hub": "dckr_pat_" + _r(URL, 27),
        "sendgrid": "SG." + _r(URL, 22) + "." + _r(URL, 43),
        "mailgun": "key-" + _r(HEX, 32),
        "sentry-dsn": _r(HEX, 32),
        "neptune": base64.b64encode(json.dumps({"api_address": "https://app.neptune.ai",
                                                "api_url": "https://app.neptune.ai",
                                                "api_key": u}).encode()).decode(),
        "modelscope": "ms-" + u,
        "wandb-local": "local-" + _r(HEX, 40),
        "aws-access-key-id": "AKIA" + _r(string.ascii_uppercase + string.digits, 16),
        "aws-session-token": aws_session,
        "pem-rsa": _pem("RSA "),
        "pem-openssh": _pem("OPENSSH "),
    }
    planted = {k: (v, v) for k, v in c.items()}
    planted["sentry-dsn"] = (f"https://{c['sentry-dsn']}@o4504.ingest.sentry.io/45", c["sentry-dsn"])
    pw = _r(ALNUM, 20)
    planted["database-url"] = (f"postgresql://mlflow:{pw}@db.internal:5432/mlflow", pw)
    bpw = _r(ALNUM, 18)
    planted["basic-auth-url"] = (f"https://alice:{bpw}@registry.example.com/v2/", bpw)
    planted["twilio-client"] = (f'Client("AC{_r(HEX, 32)}", "{twilio}")', twilio)
    kag = _r(HEX, 32)
    planted["kaggle-json"] = (json.dumps({"username": "alice", "key": kag}), kag)
    planted["azure-storage"] = ("DefaultEndpointsProtocol=https;AccountName=ckpt;AccountKey="
                                f"{acct_key};EndpointSuffix=core.windows.net", acct_key)
    sas = _r(B64, 43) + "="
    planted["azure-sas"] = ("https://ckpt.blob.core.windows.net/c/m.bin?sv=2024-11-04&ss=b&sp=r"
                            f"&se=2026-12-01T00:00:00Z&sig={sas.replace('+', '%2B').replace('=', '%3D')}",
                            sas.rstrip("="))
    gcp = _pem("")
    planted["gcp-service-account"] = (json.dumps({"type": "service_account", "project_id": "p",
                                                  "private_key": gcp + "\n"}), gcp)
    nk = _r(HEX, 40)
    planted["netrc"] = (f"machine api.wandb.ai\n  login user\n  password {nk}\n", nk)
    return planted


CORPUS = corpus()
TOKENS = {k: v for k, v in CORPUS.items() if v[0] == v[1] and "\n" not in v[0]}


def _secret_leaks(secret: str, out: str) -> list[str]:
    # PEM lines: each body line is a secret on its own
    return [f for line in secret.splitlines() if "-----" not in line for f in leaked(line, out)]


@pytest.mark.parametrize("shape", sorted(CORPUS))
def test_every_shape_vanishes_in_plain_text(shape: str) -> None:
    planted, secret = CORPUS[shape]
    out = redact_text(f"[rank0]: RuntimeError: upload failed with {planted} (retrying)")
    assert not _secret_leaks(secret, out), out


@pytest.mark.parametrize("shape", sorted(TOKENS))
def test_a_token_shape_vanishes_under_a_neutral_key(shape: str) -> None:
    token = TOKENS[shape][0]
    for text in (json.dumps({"x": token}), f"x: {token}", f"'x': '{token}'"):
        out = redact_text(text)
        assert not _secret_leaks(token, out), out


@pytest.mark.parametrize("shape", sorted(CORPUS))
def test_base64_wrapped_secret_vanishes(shape: str) -> None:
    planted, secret = CORPUS[shape]
    docker_auth = base64.b64encode(f"alice:{planted}".encode()).decode()
    k8s = base64.b64encode(planted.encode()).decode()
    texts = [json.dumps({"auths": {"registry.example.com": {"x": docker_auth}}}),
             f"apiVersion: v1\nkind: Secret\ndata:\n  blob: {k8s}\n",
             f"curl -H 'X-Custom: Basic {docker_auth}' https://host/"]
    for text in texts:
        out = redact_text(text)
        assert docker_auth not in out and k8s not in out, (shape, out)
        assert not _secret_leaks(secret, out), out


@pytest.mark.parametrize("shape", sorted(TOKENS))
@pytest.mark.parametrize("width", [20, 40, 64])
def test_hard_wrapped_token_vanishes(shape: str, width: int) -> None:
    token = TOKENS[shape][0]
    line = f"[rank0]: ValueError: bad credentials {token} for upload"
    wrapped = "\n".join(line[i:i + width] for i in range(0, len(line), width))
    out = redact_text(wrapped)
    assert not leaked(token, out.replace("\n", "")), out


def test_base64_that_is_not_text_and_world_info_stay() -> None:
    blob = base64.b64encode(bytes(range(256))).decode()
    world = "--world_info=eyJsb2NhbGhvc3QiOiBbMCwgMV19"
    text = f"{world} digest {blob} gradient_accumulation_steps_for_the_run"
    assert redact_text(text) == text


def test_a_wrap_joins_only_tokens() -> None:
    text = "[INFO] step=100 loss=1.2345\nlr=2e-05 grad_norm=0.5\nepoch done"
    assert redact_text(text) == text


# -- through the real outputs ------------------------------------------------------------------
def _planted_log(tmp: Path) -> Path:
    lines = [LAUNCHER, "[rank0]: Traceback (most recent call last):"]
    for i, (planted, _) in enumerate(CORPUS.values()):
        one = planted.replace("\n", "\\n")
        lines += [f'[rank0]:   File "/opt/app/train.py", line {10 + i}, in <module>',
                  f"[rank0]:     upload({one!r})"]
        lines.append(f"[rank1]: ValueError: bad credentials {one}")
        b64 = base64.b64encode(planted.encode()).decode()
        lines.append(f"[rank1]: ValueError: bad credentials {json.dumps({'x': b64})}")
    lines.append("[rank0]: RuntimeError: upload failed: see above")
    path = tmp / "train.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _assert_clean(out: str, where: str) -> None:
    bad = {k: _secret_leaks(s, out)[:1] for k, (_, s) in CORPUS.items() if _secret_leaks(s, out)}
    assert not bad, (where, bad)


def test_analyze_json_prints_no_token(tmp_path: Path) -> None:
    out = _run(["analyze", str(_planted_log(tmp_path)), "--format", "json"])
    assert "bad credentials" in out
    _assert_clean(out, "analyze --format json")


def test_report_prints_no_token(tmp_path: Path) -> None:
    log = _planted_log(tmp_path)
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(json.dumps({"train_batch_size": 8, "notes": {f"n{i}": p for i, (p, _)
                                                                in enumerate(CORPUS.values())}},
                              indent=2))
    body = tmp_path / "issue.md"
    body.write_text("old")
    msg = _run(["report", str(log), "--config", str(cfg), "-o", str(body), "--force"])
    text = body.read_text(encoding="utf-8")
    assert "bad credentials" in text or "upload failed" in text, msg
    _assert_clean(text + msg, "report --force")


def test_watch_plain_prints_no_token(tmp_path: Path) -> None:
    out = _run(["watch", str(_planted_log(tmp_path)), "--plain", "--exit-on-idle", "0"])
    assert "bad credentials" in out
    _assert_clean(out, "watch --plain")


def test_env_shows_values_only_of_known_settings() -> None:
    environ = {f"HF_NOTE_{i}": p for i, (p, _) in enumerate(CORPUS.values())}
    environ.update({f"DS_MIRROR_{i}": p for i, (p, _) in enumerate(CORPUS.values())})
    environ.update({"NCCL_DEBUG": "INFO", "HF_HUB_OFFLINE": "1", "DS_BUILD_FUSED_ADAM": "1",
                    "DS_BUILD_NOTE": "PlainNoteValue77", "HF_TOKEN": "hf_" + _r(ALNUM, 34),
                    "NCCL_PLAIN_VALUE": "PlainValueWithoutShape42"})
    env = relevant_env(environ)
    assert env["NCCL_DEBUG"] == "INFO" and env["HF_HUB_OFFLINE"] == "1"
    assert env["DS_BUILD_FUSED_ADAM"] == "1" and env["HF_TOKEN"] == "<redacted>"
    assert env["NCCL_PLAIN_VALUE"] == "<not shown>" and env["DS_BUILD_NOTE"] == "<not shown>"
    assert set(environ) <= set(env)  # every collected name is still listed
    _assert_clean(json.dumps(env), "relevant_env")


def test_env_format_json_prints_no_token(tmp_path: Path) -> None:
    environ = dict(os.environ)
    environ.update({f"HF_NOTE_{i}": p for i, (p, _) in enumerate(CORPUS.values())})
    environ.update({f"NCCL_X_{i}": p for i, (p, _) in enumerate(CORPUS.values())})
    environ["HF_NOTE_PLAIN"] = "PlainNoteValue77"
    environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "env", "--format", "json"],
                          capture_output=True, text=True, cwd=tmp_path, env=environ, timeout=300)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert json.loads(proc.stdout)["env_vars"]["HF_NOTE_PLAIN"] == "<not shown>"
    _assert_clean(proc.stdout + proc.stderr, "env --format json")
