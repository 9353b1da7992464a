"""Agent calls connect only to checked addresses, by address, and follow no redirect."""

import datetime
import http.server
import ipaddress
import ssl
import threading

import httpx
import pytest
from django.core.exceptions import ImproperlyConfigured

from interrupts.hub import egress

LOOPBACK_EXCLUDED = "!127.0.0.0/8,!::1/128"


class Recorder(http.server.ThreadingHTTPServer):
    """A local HTTP server that notes every connection it accepts and every request it reads."""

    daemon_threads = True

    def __init__(self, *args, **kwargs):
        self.connections, self.requests = 0, []
        super().__init__(*args, **kwargs)

    def verify_request(self, request, client_address):
        self.connections += 1
        return True


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's spelling)
        self.server.requests.append(self.path)
        if self.path == "/redirect/":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = f"hello {self.headers['Host']}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    recorder = Recorder(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=recorder.serve_forever, daemon=True)
    thread.start()
    yield recorder
    recorder.shutdown()
    recorder.server_close()


def url(server, host="127.0.0.1", path="/"):
    return f"http://{host}:{server.server_address[1]}{path}"


async def test_an_allowed_loopback_agent_is_reached(server):
    async with egress.agent_client(5) as client:
        response = await client.get(url(server))
    assert response.status_code == 200 and response.text == f"hello 127.0.0.1:{server.server_address[1]}"
    assert server.requests == ["/"]


async def test_an_excluded_address_is_refused_before_any_byte_is_sent(server, settings):
    settings.COUNTERSIGN_AGENT_NETWORKS = LOOPBACK_EXCLUDED
    async with egress.agent_client(5) as client:
        with pytest.raises(egress.AgentAddressRefused) as refused:
            await client.get(url(server))
    assert refused.value.code == "AGENT_ADDRESS_REFUSED"
    assert "127.0.0.1 is in 127.0.0.0/8, excluded by COUNTERSIGN_AGENT_NETWORKS" in refused.value.message
    assert server.connections == 0 and server.requests == []


async def test_a_hostname_resolving_to_a_refused_address_is_refused(server, settings):
    settings.COUNTERSIGN_AGENT_NETWORKS = LOOPBACK_EXCLUDED
    async with egress.agent_client(5) as client:
        with pytest.raises(egress.AgentAddressRefused) as refused:
            await client.get(url(server, "localhost"))
    assert refused.value.host == "localhost"
    assert refused.value.message.startswith("Countersign does not connect to localhost (")
    assert server.connections == 0


async def test_outside_the_allowed_networks_is_refused(server, settings):
    settings.COUNTERSIGN_AGENT_NETWORKS = "10.0.0.0/8"
    async with egress.agent_client(5) as client:
        with pytest.raises(egress.AgentAddressRefused, match="outside the networks"):
            await client.get(url(server))
    assert server.connections == 0


async def test_a_hostname_is_connected_to_by_the_address_checked(server, settings):
    settings.COUNTERSIGN_AGENT_NETWORKS = "127.0.0.0/8,::1/128"
    stream = await egress.CheckedBackend().connect_tcp("localhost", server.server_address[1], timeout=5)
    try:
        # The socket was opened to an address, not to a name a second lookup could answer differently.
        assert stream.get_extra_info("server_addr")[0] == "127.0.0.1"
    finally:
        await stream.aclose()


@pytest.mark.parametrize("host", [
    "169.254.169.254",          # AWS, GCP, Azure metadata
    "[fd00:ec2::254]",          # AWS metadata over IPv6
    "100.100.100.200",          # Alibaba Cloud metadata
    "169.254.1.1", "[fe80::1]",  # link-local
    "0.0.0.0", "[::]",          # unspecified
    "224.0.0.1", "[ff02::1]",   # multicast
    "[::ffff:169.254.169.254]",  # IPv4-mapped IPv6, normalised
])
async def test_metadata_and_other_never_agent_addresses_are_refused_by_default(host):
    async with egress.agent_client(1) as client:
        with pytest.raises(egress.AgentAddressRefused, match="never an agent"):
            await client.get(f"http://{host}/latest/meta-data/")


async def test_the_operator_cannot_allow_the_metadata_service(settings):
    settings.COUNTERSIGN_AGENT_NETWORKS = "169.254.0.0/16"
    async with egress.agent_client(1) as client:
        with pytest.raises(egress.AgentAddressRefused, match="never an agent"):
            await client.get("http://169.254.169.254/")


async def test_redirects_are_not_followed(server):
    async with egress.agent_client(5) as client:
        response = await client.get(url(server, path="/redirect/"))
    assert response.status_code == 302
    assert server.requests == ["/redirect/"]


def test_a_malformed_setting_is_named():
    with pytest.raises(ImproperlyConfigured, match="'10.0.0.0/33' is not a network"):
        egress.AddressPolicy.parse("10.0.0.0/8,10.0.0.0/33")


def test_the_policy_reads_exclusions_and_allowances():
    rules = egress.AddressPolicy.parse(" 10.0.0.0/8 , !10.9.0.0/16,")
    assert rules.refusal(ipaddress.ip_address("10.1.2.3")) is None
    assert "excluded" in rules.refusal(ipaddress.ip_address("10.9.0.1"))
    assert "outside" in rules.refusal(ipaddress.ip_address("192.0.2.1"))
    assert egress.AddressPolicy.parse("").refusal(ipaddress.ip_address("192.0.2.1")) is None


# --- TLS: the address is connected to, the certificate is checked against the name ---------


def _certificate(tmp_path, name: str):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


@pytest.fixture
def tls_server(tmp_path):
    cert_file, key_file = _certificate(tmp_path, "localhost")
    recorder = Recorder(("127.0.0.1", 0), Handler)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert_file, key_file)
    names = []
    server_context.sni_callback = lambda sock, name, ctx: names.append(name)
    recorder.socket = server_context.wrap_socket(recorder.socket, server_side=True)
    recorder.sni = names
    thread = threading.Thread(target=recorder.serve_forever, daemon=True)
    thread.start()
    yield recorder, cert_file
    recorder.shutdown()
    recorder.server_close()


async def test_tls_checks_the_hostname_and_sends_it_as_sni(tls_server, settings):
    server, cert_file = tls_server
    settings.COUNTERSIGN_AGENT_NETWORKS = "127.0.0.0/8,::1/128"
    trusted = ssl.create_default_context(cafile=str(cert_file))
    async with egress.agent_client(5, verify=trusted) as client:
        response = await client.get(f"https://localhost:{server.server_address[1]}/")
    assert response.status_code == 200
    assert server.sni == ["localhost"]


async def test_tls_refuses_a_certificate_for_another_name(tls_server, tmp_path):
    server, _ = tls_server
    other, _ = _certificate(tmp_path, "agents.example.com")
    async with egress.agent_client(5, verify=ssl.create_default_context(cafile=str(other))) as client:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.get(f"https://127.0.0.1:{server.server_address[1]}/")
