"""Random-looking values under neutral names (issue 24: ``"x": "<token>"``) are redacted by their
look (dsdoctor/redact/entropy.py); hashes, UUIDs, identifiers, paths and the values real logs
carry under such names stay.

The keys are generated in the providers' documented alphabets and lengths (a Comet API key: 25
letters and digits; a ClearML access key: 20 upper-case letters and digits, its secret: 50
letters and digits; a base64url token of 32 and a base64 one of 40): the look of a random key
is a rate, not a rule, so the tests count how many of 1,000 are found.
"""

from __future__ import annotations

import glob
import json
import random
import string
import uuid
from pathlib import Path

import pytest
from test_redact_outputs import _log, _run

from dsdoctor.redact import redact_text
from dsdoctor.redact.entropy import neutral_named_values

REPO = Path(__file__).resolve().parents[1]
_RNG = random.Random(2611)
ALNUM = string.ascii_letters + string.digits
SHAPES = {
    "comet-25": (25, ALNUM),
    "clearml-key-20": (20, string.ascii_uppercase + string.digits),
    "clearml-secret-50": (50, ALNUM),
    "base64url-32": (32, ALNUM + "-_"),
    "base64-40": (40, ALNUM + "+/"),
}


def _key(shape: str, rng: random.Random = _RNG) -> str:
    n, alphabet = SHAPES[shape]
    return "".join(rng.choice(alphabet) for _ in range(n))


COMET = _key("comet-25")


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_most_random_keys_under_a_neutral_name_go(shape: str) -> None:
    rng = random.Random(shape)
    keys = [_key(shape, rng) for _ in range(1000)]
    found = sum(k not in redact_text(f'{{"x": "{k}"}}') for k in keys)
    # measured: 97-99.6% by shape; a key that happens to hold a word or few digits stays
    assert found >= 960, (shape, found)


@pytest.mark.parametrize("text", [
    f'{{"x": "{COMET}"}}',
    f"x={COMET}",
    f"value: {COMET}",
    f"'x': '{COMET}'",
    f'{{\\"x\\": \\"{COMET}\\"}}',  # JSON inside a JSON string
    f"MY_SETTING={COMET} python train.py",
    f"config = {{'project': 'demo', 'x': '{COMET}'}}",
])
def test_a_random_key_goes_in_every_key_value_form(text: str) -> None:
    out = redact_text(text)
    assert COMET not in out and "<redacted>" in out, out


HEX32 = "".join(_RNG.choice("0123456789abcdef") for _ in range(32))


@pytest.mark.parametrize("text", [
    f'{{"x": "{HEX32}"}}',  # hex: a hash looks the same (docs/security.md, "Limits")
    f'{{"x": "{uuid.UUID(int=_RNG.getrandbits(128), version=4)}"}}',
    "CUDA_VISIBLE_DEVICES=GPU-8e3c1b2a-1d2e-3f4a-5b6c-7d8e9f0a1b2c",
    '"architectures": "Qwen2VLForConditionalGeneration"',
    "worker: DTensorPolicyWorkerV2",
    "checkpoint: global_step1000_Model2Layer3",
    "logdir: /home/ubuntu/ray_results/AlpaTrainer_2022-08-04_22-02-35",
    "world_info: eyJsb2NhbGhvc3QiOiBbMCwgMV19",  # base64 of text: the base64 pass reads it
    "ImportError: undefined symbol: _ZN3c104cuda20CUDACachingAllocator9allocatorE",  # llmfoundry#62
    f"commit: {COMET}",  # a name that says what the value is
    f"run_id={COMET}",
    f"error while reading {COMET} from the cache",  # a bare word: no name at all
])
def test_what_is_no_key_stays(text: str) -> None:
    assert redact_text(text) == text


def test_real_logs_lose_only_a_random_hostname() -> None:
    """Every value the look takes in the real logs the project holds (samples, the open wild
    set, the extra set): one, an Alibaba Cloud host name (iZ + random), an identity anyway."""
    files = [f for pattern in ("sample_logs/**/*", "tests/data/real_logs_wild/*",
                               "tests/data/real_logs_extra/**/*")
             for f in glob.glob(str(REPO / pattern), recursive=True) if Path(f).is_file()]
    assert len(files) > 500
    taken = []
    for f in files:
        text = Path(f).read_text(encoding="utf-8", errors="replace")
        taken += [(key, val) for key, val, _start, _end in neutral_named_values(text)]
    assert taken == [("host", "iZl4v544jr5cejwaqci3xvZ")]


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_analyze_prints_no_neutral_named_key(tmp_path: Path, fmt: str) -> None:
    log = _log(tmp_path, [json.dumps({"x": COMET})])
    out = _run(["analyze", str(log), "--format", fmt])
    assert "upload failed" in out and COMET not in out


def test_report_and_watch_print_no_neutral_named_key(tmp_path: Path) -> None:
    log = _log(tmp_path, [json.dumps({"x": COMET}), f"value={_key('clearml-secret-50')}"])
    issue = tmp_path / "issue.md"
    _run(["report", str(log), "-o", str(issue)])
    body = issue.read_text(encoding="utf-8")
    assert "upload failed" in body and COMET not in body
    out = _run(["watch", str(log), "--plain", "--exit-on-idle", "0"])
    assert "bad credentials" in out and COMET not in out
