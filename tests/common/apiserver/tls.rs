//! TLS for the test API server, as kube-apiserver serves: rustls with a certificate made for this run
//! (the `openssl` command, an ECDSA P-256 key that lives only in memory: nothing is written to disk, no key
//! is committed), offering HTTP/2 and HTTP/1.1 by ALPN ([`Alpn::H2`]) or HTTP/1.1 only ([`Alpn::Http1`],
//! a server that does not speak HTTP/2). axum's server picks HTTP/2 or HTTP/1.1 from what the client
//! sends first, so the protocol the client negotiated is the one it speaks.
//!
//! The handshake runs in the listener's `accept`, bounded by [`HANDSHAKE_TIMEOUT`]: one client at a time,
//! which is all a test needs. The bytes counted (`traffic.rs`) are the TLS records on the wire.

use super::traffic::{CountingListener, CountingStream};
use anyhow::{Context, Result, bail};
use axum::serve::Listener;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client may take over its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The protocols the server offers by ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alpn {
    /// `h2` then `http/1.1`, as kube-apiserver.
    H2,
    /// `http/1.1` only.
    Http1,
}

/// The server's certificate and key, PEM.
#[derive(Clone)]
pub struct Identity {
    /// Self-signed certificate for `127.0.0.1`, `::1` and `localhost`; also the clients' CA.
    pub cert_pem: String,
    key_pem: String,
}

impl Identity {
    /// A new key and certificate, valid for a day.
    pub fn generate() -> Result<Identity> {
        let out = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:prime256v1", "-noenc", "-days", "1"])
            .args(["-subj", "/CN=test-apiserver", "-addext"])
            .arg("subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost")
            .args(["-addext", "basicConstraints=critical,CA:FALSE"])
            .args(["-keyout", "-", "-out", "-"])
            .output()
            .context("run openssl (the test API server's TLS certificate needs it)")?;
        if !out.status.success() {
            bail!(
                "openssl req failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let pem = String::from_utf8(out.stdout).context("openssl output")?;
        let start = pem
            .find("-----BEGIN CERTIFICATE-----")
            .context("no certificate in openssl's output")?;
        Ok(Identity {
            cert_pem: pem[start..].to_string(),
            key_pem: pem[..start].to_string(),
        })
    }

    /// A TLS acceptor with this identity offering `alpn`.
    pub fn acceptor(&self, alpn: Alpn) -> Result<TlsAcceptor> {
        let cert = CertificateDer::from_pem_slice(self.cert_pem.as_bytes()).context("cert PEM")?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).context("key PEM")?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS versions")?
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .context("TLS certificate")?;
        config.alpn_protocols = match alpn {
            Alpn::H2 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            Alpn::Http1 => vec![b"http/1.1".to_vec()],
        };
        Ok(TlsAcceptor::from(Arc::new(config)))
    }

    /// The certificate as a kubeconfig's `certificate-authority-data`.
    pub fn ca_data(&self) -> String {
        base64(self.cert_pem.as_bytes())
    }
}

/// Standard base64 with padding.
fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A counting listener whose connections are TLS, handshaken in [`Listener::accept`].
pub struct TlsListener {
    inner: CountingListener,
    acceptor: TlsAcceptor,
}

impl TlsListener {
    /// TLS with `acceptor` on the connections of `inner`.
    pub fn new(inner: CountingListener, acceptor: TlsAcceptor) -> Self {
        TlsListener { inner, acceptor }
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<CountingStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (tcp, addr) = self.inner.accept().await;
            let handshake = self.acceptor.accept(tcp);
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                Ok(Ok(tls)) => return (tls, addr),
                Ok(Err(e)) => eprintln!("test API server: TLS handshake from {addr}: {e}"),
                Err(_) => eprintln!("test API server: TLS handshake from {addr} timed out"),
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}
