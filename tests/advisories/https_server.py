"""An https server on 127.0.0.1 serving an OSV export, with a self-signed certificate made here.

It answers `GET /osv/all.zip` with the bytes it currently holds, an ETag and Last-Modified,
and 304 to a matching If-None-Match; `replace` swaps the bytes (a new export), `requests`
records what came in. The client side trusts the certificate through `client_context`, the
same way an operator would point SSL_CERT_FILE at a private CA.
"""

from __future__ import annotations

import hashlib
import ipaddress
import ssl
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.servers.ports import free_port

__all__ = ["ExportServer", "self_signed"]


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, written as PEM files in `directory`."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mirrorgate test export")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@dataclass
class ExportServer:
    directory: Path
    body: bytes = b""
    requests: list[dict[str, str]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/osv/all.zip"

    @property
    def etag(self) -> str:
        return f'"{hashlib.sha256(self.body).hexdigest()[:16]}"'

    def replace(self, body: bytes) -> None:
        self.body = body

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.directory / "cert.pem"))
        return context

    async def _export(self, request: web.Request) -> web.Response:
        self.requests.append(dict(request.headers))
        if request.headers.get("If-None-Match") == self.etag:
            self.statuses.append(304)
            return web.Response(status=304, headers={"ETag": self.etag})
        self.statuses.append(200)
        return web.Response(body=self.body, content_type="application/zip",
                            headers={"ETag": self.etag,
                                     "Last-Modified": "Mon, 30 Nov 2026 12:00:00 GMT"})

    async def start(self) -> None:
        cert, key = self_signed(self.directory)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        app = web.Application()
        app.router.add_get("/osv/all.zip", self._export)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=context).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
