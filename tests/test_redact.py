"""Planted secrets of every kind must never survive redaction; harmless look-alikes must."""

from __future__ import annotations

import pytest

from dsdoctor.redact import REDACTED, Redactor, is_secret_flag, is_secret_name, redact_env, redact_text

# Secrets are assembled at run time so secret scanners do not flag this file; they have the real
# shapes (length, alphabet, prefix) of each provider's keys.
HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
GH_CLASSIC = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
GH_OAUTH = "gho_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"
GH_PAT = "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS"
OPENAI = "sk-" + "proj-" + "Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8"
OPENAI_OLD = "sk-" + "T3BlbkFJ" + "abcdefghijklmnopqrstuvwxyz012345"
AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
WANDB = "0123456789abcdef0123456789abcdef01234567"
URL_PASS = "S3cr3tPassw0rd"
BEARER = "eyJhbGciOiJIUzI1NiJ9" + "xyzXYZ123"


def _clean(text: str, secret: str) -> str:
    out = redact_text(text)
    assert secret not in out, out
    assert REDACTED in out, out
    return out


@pytest.mark.parametrize(
    ("line", "secret", "kept"),
    [
        (f"export HF_TOKEN={HF}", HF, "HF_TOKEN="),
        (f"huggingface-cli login --token {HF}", HF, "--token"),
        (f"git clone https://{GH_CLASSIC}@github.com/org/repo.git", GH_CLASSIC, "github.com/org/repo.git"),
        (f"GITHUB_TOKEN: {GH_OAUTH}", GH_OAUTH, "GITHUB_TOKEN"),
        (f"token = {GH_PAT}", GH_PAT, "token"),
        (f"openai.api_key = '{OPENAI}'", OPENAI, "openai.api_key"),
        (f"using key {OPENAI_OLD} for eval", OPENAI_OLD, "for eval"),
        (f"aws_access_key_id = {AWS_ID}", AWS_ID, "aws_access_key_id"),
        (f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, "aws_secret_access_key"),
        (f"AWS_SECRET_ACCESS_KEY={AWS_SECRET} python train.py", AWS_SECRET, "python train.py"),
        (f"WANDB_API_KEY={WANDB} deepspeed train.py", WANDB, "deepspeed train.py"),
        (f"wandb login {WANDB}", WANDB, "wandb login"),
        (f"wandb login --relogin {WANDB}", WANDB, "--relogin"),
        (f"MASTER=postgres://admin:{URL_PASS}@db.example.com:5432/x", URL_PASS, "admin:"),
        (f"pip install --index-url https://user:{URL_PASS}@pypi.corp/simple pkg", URL_PASS, "pypi.corp/simple"),
        ("--hub_token xyzSECRETvalue42 --output_dir out", "xyzSECRETvalue42", "--output_dir out"),
        ("--hub-token=xyzSECRETvalue42", "xyzSECRETvalue42", "--hub-token="),
        ("--wandb_key abcSECRET999 --bf16", "abcSECRET999", "--bf16"),
        # the launcher's "exits with return code" line prints argv as a Python list
        ("['/usr/bin/python3', '-u', 'train.py', '--hub_token', 'xyzSECRETvalue42'] exits with return code = 1",
         "xyzSECRETvalue42", "exits with return code = 1"),
        ("--db_password hunter2hunter2", "hunter2hunter2", "--db_password"),
        ("--client_secret 'qwertyQWERTY123'", "qwertyQWERTY123", "--client_secret"),
        (f"Authorization: Bearer {BEARER}", BEARER, "Authorization"),
        ("curl -H 'Authorization: token abc123SECRETdef456' https://api", "abc123SECRETdef456", "curl"),
        ('{"hub_token": "plainSecretValue77", "fp16": true}', "plainSecretValue77", '"fp16": true'),
        ("hub_token=plainSecretValue77, hub_strategy=every_save", "plainSecretValue77", "hub_strategy"),
    ],
)
def test_each_secret_kind_is_removed(line: str, secret: str, kept: str) -> None:
    out = _clean(line, secret)
    assert kept in out


def test_secrets_inside_a_real_launcher_line() -> None:
    # The DeepSpeed launcher's real "cmd = ..." format with a token argument planted in it.
    line = (
        "[2023-05-01 10:00:00,000] [INFO] [launch.py:229:main] cmd = /usr/bin/python3 -u -m "
        "deepspeed.launcher.launch --world_info=eyJsb2NhbGhvc3QiOiBbMF19 --master_addr=127.0.0.1 "
        f"--master_port=29500 train.py --hub_token {HF} --push_to_hub --deepspeed ds_config.json"
    )
    out = redact_text(line)
    assert HF not in out
    assert "--push_to_hub --deepspeed ds_config.json" in out
    assert "--world_info=eyJsb2NhbGhvc3QiOiBbMF19" in out  # base64 world info is not a secret


@pytest.mark.parametrize(
    "harmless",
    [
        "--max_new_tokens 512 --pad_token '<pad>' --add_special_tokens True",
        "tokenizer_name_or_path = gpt2",
        "{'loss': 1.2, 'grad_norm': 0.5, 'learning_rate': 2e-05, 'epoch': 0.1}",
        "[INFO] [config.py:957:print]   initial_dynamic_scale ........ 65536",
        "hub_token=<HUB_TOKEN>, hub_private_repo=None",
        "--use_auth_token True",
        "cmd = python -u -m deepspeed.launcher.launch --master_port=29500 train.py",
        "commit 0123456789abcdef0123456789abcdef01234567 is fine outside wandb",
        "task-abcdefghijklmnopqrstuvwxyz0123456789",
        "a non-key value and a multi-token prompt stay as they are",
    ],
)
def test_harmless_text_is_untouched(harmless: str) -> None:
    assert redact_text(harmless) == harmless


def test_secret_names() -> None:
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY",
                 "AWS_ACCESS_KEY_ID", "GITHUB_TOKEN", "OPENAI_API_KEY", "DB_PASSWORD", "hub_token",
                 "NCCL_TOKEN_FILE_SECRET", "api-key"):
        assert is_secret_name(name), name
    for name in ("NCCL_DEBUG", "MASTER_ADDR", "CUDA_VISIBLE_DEVICES", "max_new_tokens", "pad_token",
                 "TOKENIZERS_PARALLELISM", "HF_HOME", "DS_ACCELERATOR", "monkey"):
        assert not is_secret_name(name), name
    assert is_secret_flag("--hub_token") and is_secret_flag("--wandb-key")
    assert not is_secret_flag("--max_new_tokens") and not is_secret_flag("--eos_token")


def test_env_redaction_hides_values_of_secret_names_and_secret_values() -> None:
    env = {
        "HF_TOKEN": "anything-at-all",
        "WANDB_API_KEY": WANDB,
        "NCCL_DEBUG": "INFO",
        "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
        "SOME_URL": f"https://bob:{URL_PASS}@proxy:3128",
        "PIP_EXTRA": HF,
    }
    out = redact_env(env)
    assert out["HF_TOKEN"] == REDACTED
    assert out["WANDB_API_KEY"] == REDACTED
    assert out["NCCL_DEBUG"] == "INFO"
    assert out["HF_HUB_DISABLE_IMPLICIT_TOKEN"] == "1"
    assert URL_PASS not in out["SOME_URL"] and "proxy:3128" in out["SOME_URL"]
    assert HF not in out["PIP_EXTRA"]


def test_config_object_redaction() -> None:
    cfg = {"train_batch_size": 8, "hub_token": "abcdef", "wandb": {"api_key": "k" * 12},
           "comment": f"uses {HF}", "tags": [f"Bearer {BEARER}"], "fp16": {"enabled": True}}
    out = Redactor().obj(cfg)
    assert out["hub_token"] == REDACTED
    assert out["wandb"]["api_key"] == REDACTED
    assert HF not in out["comment"] and BEARER not in out["tags"][0]
    assert out["train_batch_size"] == 8 and out["fp16"] == {"enabled": True}


def test_paths_are_hidden_only_on_request() -> None:
    line = "File \"/home/alice/proj/train.py\", line 12; cache /Users/bob/.cache; C:\\Users\\carol\\x.py"
    assert redact_text(line) == line
    out = redact_text(line, paths=True)
    for user in ("alice", "bob", "carol"):
        assert user not in out
    assert "/home/<user>/proj/train.py" in out


def test_hosts_are_hidden_consistently_only_on_request() -> None:
    text = (
        "cmd = python -u -m deepspeed.launcher.launch --world_info=e30= --master_addr=gpu-node-07 "
        "--master_port=29500 train.py\n"
        "gpu-node-07: [2024-01-01 00:00:00,000] [INFO] connecting to 10.1.2.3:29500\n"
        "gpu-node-08: Traceback (most recent call last):\n"
        "ip-172-31-5-9.ec2.internal: NCCL INFO Bootstrap : Using eth0:10.1.2.4<0>\n"
        "loopback 127.0.0.1 stays; version 2.18.1 stays\n"
    )
    assert redact_text(text) == text
    r = Redactor(hosts=True)
    r.learn(text)
    out = r.text(text)
    for host in ("gpu-node-07", "gpu-node-08", "10.1.2.3", "10.1.2.4", "ip-172-31-5-9", "172.31.5.9"):
        assert host not in out, host
    assert "127.0.0.1" in out and "2.18.1" in out
    # same host -> same placeholder, different hosts -> different placeholders
    first = out.splitlines()[0].split("--master_addr=")[1].split()[0]
    assert out.splitlines()[1].startswith(first + ":")
    assert not out.splitlines()[2].startswith(first + ":")


def test_redact_report_covers_every_text_of_a_report() -> None:
    from dsdoctor.model import Evidence, Fact, FileSummary, Finding, Report, Symptom
    from dsdoctor.redact import redact_report

    line = f"cmd = python -u -m deepspeed.launcher.launch train.py --hub_token {HF}"
    e = Evidence("train.log", 3, line, 0)
    rep = Report(
        files=(FileSummary("train.log", 10, 100),),
        symptoms=(Symptom("gpu-oom", 1, (e,), e, e, values={"cmd": [line]}),),
        findings=(Finding("DS105", "gpu-out-of-memory", "error", f"OOM with {HF}", f"msg {HF}",
                          fix=f"fix {HF}", evidence=(e,)),),
        facts=(Fact("launch-cmd", {"cmd": line, "hub_token": "plainSecretValue77"}, e),),
        inputs={"env": {"env_vars": {"HF_TOKEN": HF}}},
        notes=(f"note {HF}",),
    )
    assert HF in str(rep.to_dict())
    out = redact_report(rep)
    text = str(out.to_dict())
    assert HF not in text and "plainSecretValue77" not in text
    assert "--hub_token <redacted>" in out.symptoms[0].first.text
    assert out.symptoms[0].first.line == 3 and out.findings[0].rule == "DS105"
