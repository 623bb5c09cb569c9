"""Remove secrets (and, in ``report``, what identifies the user and the cluster) from every text
before it leaves the machine.

* :mod:`.formats` - the shared list of secret formats (``secret_formats.yaml``, rules as data)
* :mod:`.names` - values of secret-named keys, variables and flags, whatever they look like
* :mod:`.identity` - user names, home paths, host names and IPs as stable placeholders
* :mod:`.redactor` - :class:`Redactor`, the one entry point every output path uses
"""

from dsdoctor.redact.formats import REDACTED, SecretFormat, redact_formats, secret_formats
from dsdoctor.redact.names import is_secret_flag, is_secret_name
from dsdoctor.redact.redactor import (
    Redactor,
    redact_env,
    redact_report,
    redact_secrets,
    redact_text,
)

__all__ = [
    "REDACTED", "Redactor", "SecretFormat", "is_secret_flag", "is_secret_name", "redact_env",
    "redact_formats", "redact_report", "redact_secrets", "redact_text", "secret_formats",
]
