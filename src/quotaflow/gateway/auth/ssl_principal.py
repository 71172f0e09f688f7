"""The principal of a TLS client certificate, as Kafka names it: ``ssl.principal.mapping.rules`` over the subject DN.

Kafka takes the certificate subject as ``X500Principal.getName()`` renders it (RFC 2253: the most specific RDN first,
``CN=alice,OU=eng,O=corp,C=US``) and maps it with ``ssl.principal.mapping.rules``: a comma-separated list of
``RULE:pattern/replacement/[L|U]`` and ``DEFAULT``, tried in order. A rule applies when its pattern matches the
whole DN; the result is the DN with every match replaced (Java ``replaceAll``: ``$1`` refers to a group, ``\\``
escapes), lower- or upper-cased with ``L`` / ``U``. ``DEFAULT`` keeps the DN. When no rule applies, the client is
not authenticated and the connection is closed, as Kafka's ``NoMatchingRule`` does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from quotaflow.core.errors import CommandError, QuotaflowError

DEFAULT_RULES: Final = "DEFAULT"

# Kafka's rule grammar: DEFAULT, or RULE:pattern/replacement/ with an optional L or U; '\' escapes inside the parts.
# The splitter cuts the config value into rule texts (a pattern may hold commas); each text must then parse whole.
_RULE: Final = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_PARSER: Final = re.compile(_RULE)
_SPLITTER: Final = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")

# OpenSSL's long attribute names (``ssl.getpeercert()``) -> the keywords RFC 2253 and Java's X500Principal use
_KEYWORDS: Final = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET", "domainComponent": "DC",
    "userId": "UID",
}
_EMAIL_OID: Final = "1.2.840.113549.1.9.1"  # Java renders emailAddress as its OID with the DER value in hex


class SslPrincipalMappingError(QuotaflowError):
    """No ``ssl.principal.mapping.rules`` rule applies to a client certificate's DN (Kafka's NoMatchingRule)."""


@dataclass(frozen=True, slots=True)
class _Rule:
    is_default: bool
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.is_default:
            return dn
        assert self.pattern is not None
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(lambda m: _java_replacement(self.replacement, m), dn)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


def _java_replacement(replacement: str, match: re.Match[str]) -> str:
    """Expand a Java ``Matcher.replaceAll`` replacement: ``$n`` is group n (a reference to a group the pattern does
    not have is kept literally, as Kafka escapes it), ``\\x`` is ``x``."""
    out: list[str] = []
    i, groups = 0, match.re.groups
    while i < len(replacement):
        c = replacement[i]
        if c == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
        elif c == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            j = i + 2
            number = int(replacement[i + 1])
            while j < len(replacement) and replacement[j].isdigit() and number * 10 + int(replacement[j]) <= groups:
                number = number * 10 + int(replacement[j])
                j += 1
            if number > groups:
                out.append(replacement[i:j])
            else:
                out.append(match.group(number) or "")
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules``, parsed once per listener."""

    def __init__(self, rules: Sequence[_Rule]) -> None:
        self.rules = list(rules)

    @classmethod
    def from_rules(cls, text: str | None) -> SslPrincipalMapper:
        """Parse ``ssl.principal.mapping.rules`` (unset or blank: ``DEFAULT``); ``CommandError`` on a bad rule."""
        text = DEFAULT_RULES if text is None or not text.strip() else text
        rules: list[_Rule] = []
        for rule in (m.group(1) for m in _SPLITTER.finditer(text)):
            m = _PARSER.match(rule)
            if m is None or m.end() != len(rule):
                raise CommandError(f"Invalid rule: {rule}")
            if m.group(1):
                rules.append(_Rule(True))
            elif m.group(2) is not None:
                try:
                    pattern = re.compile(m.group(2))
                except re.error as e:
                    raise CommandError(f"Invalid rule: {rule} ({e})") from e
                rules.append(_Rule(False, pattern, m.group(3), m.group(4) or ""))
            # an empty rule text (between separators, or at the end) is ignored, as Kafka does
        return cls(rules)

    def name(self, dn: str) -> str:
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise SslPrincipalMappingError(f"No rules apply to {dn}, rules {self}")

    def __str__(self) -> str:
        return ", ".join("DEFAULT" if r.is_default else f"RULE:{r.pattern.pattern if r.pattern else ''}/"
                         f"{r.replacement}/{r.case}" for r in self.rules)


def _escape(value: str) -> str:
    """RFC 2253 escaping of an attribute value, as Java's X500Principal renders it."""
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def _der_ia5(value: str) -> str:
    data = value.encode("ascii", "replace")
    if len(data) < 0x80:
        length = bytes([len(data)])
    else:
        size = len(data).to_bytes((len(data).bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(size)]) + size
    return "#" + (b"\x16" + length + data).hex()


def distinguished_name(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """The RFC 2253 DN of a ``getpeercert()`` subject: RDNs most specific first, multi-valued RDNs joined by ``+``.
    Attributes without an RFC 2253 keyword are named by their OpenSSL name (Java would use the OID)."""
    rdns = []
    for rdn in reversed(subject):
        parts = []
        for name, value in rdn:
            if name == "emailAddress":
                parts.append(f"{_EMAIL_OID}={_der_ia5(value)}")
            else:
                parts.append(f"{_KEYWORDS.get(name, name)}={_escape(value)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)
