"""A throwaway CA and certificates for tests and development (never for production: the keys are
written unencrypted, the CA's key beside them).

    python scripts/make_certs.py DIR [--ip 10.0.0.5 ...] [--dns broker1.example ...]

makes in DIR (PEM, EC P-256, with the ``openssl`` command; ``spark-mq dev --tls`` makes them beside its store):

    ca.pem, ca.key            the test CA (tls.server.trustCertPath / tls.client.trustCertPath / --tls-ca)
    server.pem, server.key    signed by it, valid for 127.0.0.1, localhost and every --ip / --dns given
                              (tls.server.certPath / tls.server.keyPath)
    client.pem, client.key    signed by it, for mutual TLS (tls.client.certPath / keyPath, --tls-cert / --tls-key)
    expired.pem, expired.key  signed by it for the same names, but expired a day ago
    other-ca.pem, other.pem, other.key   a second CA and a server certificate it signed (untrusted by ca.pem)
    wronghost.pem, wronghost.key         signed by ca.pem, valid only for the host elsewhere.invalid

Idempotent: files already there are kept (delete DIR to start over), so servers and clients that use
them keep agreeing. Exits 1 naming what failed when ``openssl`` is missing or refuses.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

DAYS = 825  # the longest validity current TLS clients accept for a server certificate
CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
LOOPBACK_SANS = ["IP:127.0.0.1", "DNS:localhost"]


def _openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"make_certs: openssl {args[0]} failed: {done.stderr.strip()}")


def _ca(out: Path, name: str, cn: str) -> None:
    """A self-signed CA certificate ``name``.pem and its key ``name``.key."""
    if (out / f"{name}.pem").exists():
        return
    _openssl("req", "-x509", *CURVE, "-keyout", str(out / f"{name}.key"), "-out", str(out / f"{name}.pem"),
             "-subj", f"/CN={cn}", "-days", str(DAYS), "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")


def _leaf(out: Path, name: str, ca: str, cn: str, sans: list[str], usage: str, days: int = DAYS) -> None:
    """A certificate ``name``.pem (key ``name``.key) signed by CA ``ca``; ``days`` < 0: already expired."""
    if (out / f"{name}.pem").exists():
        return
    with tempfile.TemporaryDirectory() as tmp:
        csr, ext = Path(tmp) / "req.csr", Path(tmp) / "ext.cnf"
        _openssl("req", *CURVE, "-keyout", str(out / f"{name}.key"), "-out", str(csr), "-subj", f"/CN={cn}")
        lines = ["basicConstraints=CA:FALSE", f"extendedKeyUsage={usage}"]
        if sans:
            lines.append("subjectAltName=" + ",".join(sans))
        ext.write_text("\n".join(lines) + "\n")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(out / f"{ca}.pem"), "-CAkey", str(out / f"{ca}.key"),
                 "-set_serial", str(int.from_bytes(name.encode(), "big") % 2**63), "-days", str(days),
                 "-extfile", str(ext), "-out", str(out / f"{name}.pem"))


def make_certs(out: Path, ips: list[str], names: list[str]) -> None:
    """Write the set described in the module docstring into ``out`` (created), keeping files already there."""
    if shutil.which("openssl") is None:
        raise SystemExit("make_certs: the openssl command is not installed (apt-get install openssl)")
    out.mkdir(parents=True, exist_ok=True)
    sans = LOOPBACK_SANS + [f"IP:{ip}" for ip in ips] + [f"DNS:{n}" for n in names]
    _ca(out, "ca", "spark-mq test CA")
    _leaf(out, "server", "ca", "spark-mq server", sans, "serverAuth,clientAuth")
    _leaf(out, "client", "ca", "spark-mq client", [], "clientAuth")
    _leaf(out, "expired", "ca", "spark-mq expired", sans, "serverAuth,clientAuth", days=-1)
    _ca(out, "other-ca", "another CA")
    _leaf(out, "other", "other-ca", "spark-mq other", sans, "serverAuth,clientAuth")
    _leaf(out, "wronghost", "ca", "spark-mq elsewhere", ["DNS:elsewhere.invalid"], "serverAuth")
    for key in out.glob("*.key"):
        key.chmod(0o600)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", type=Path, help="directory to write the certificates to (created)")
    parser.add_argument("--ip", action="append", default=[], help="another IP address the server certificate "
                        "is valid for (repeatable; 127.0.0.1 always is)")
    parser.add_argument("--dns", action="append", default=[], help="another host name the server certificate "
                        "is valid for (repeatable; localhost always is)")
    args = parser.parse_args(argv)
    make_certs(args.dir, args.ip, args.dns)
    print(f"certificates in {args.dir}: ca.pem, server.pem/.key, client.pem/.key, expired.pem/.key, "
          "other-ca.pem, other.pem/.key, wronghost.pem/.key")
    return 0

