//! The front door: which HTTP requests may reach the host at all, decided
//! from the request head alone, before any WebSocket frame (issue 46).
//!
//! A browser lets any web page open a WebSocket to `ws://127.0.0.1:8765/`
//! and leaves it to the server to refuse: it sends the page's `Origin` with
//! the upgrade, and a DNS-rebinding page reaches the listener under a
//! `Host` of its own. Three checks close that, in this order, each answered
//! on the HTTP upgrade itself (never a frame):
//!
//! 1. **Host** ([`Gate::host_allowed`]), for every request: on a connection
//!    that arrived on a loopback address, a loopback name or address
//!    (`localhost`, `127.0.0.1`, `[::1]`, …); on any other, the address the
//!    connection arrived on. Names in `allowed_hosts` (a reverse proxy's)
//!    are taken on either, with the port they name or any. Anything else,
//!    or no `Host` at all, is `403` (a rebinding page's name).
//! 2. **Origin** ([`Gate::origin_allowed`]), for an upgrade that carries
//!    one: the daemon's own page (an `http://` or `https://` origin of the
//!    very host and port the upgrade is addressed to), VS Code desktop's
//!    renderer (`vscode-file://vscode-app`: its agent-host client opens its
//!    WebSocket from the renderer), or one listed in `allowed_origins`;
//!    anything else, `null` and other local servers' pages included, is
//!    `403`.
//!    Native clients (the `ahp` crate, the Python example, Node) send none.
//! 3. **Connection token**, for an upgrade on a host that requires one (a
//!    host with no users directory, unless started with `--no-token`): the
//!    token from `Authorization: Bearer`, `?token=` or `?tkn=` (VS Code's
//!    query name) must be the host's; missing or wrong is `401`. A host with
//!    a users directory signs a connection in by its token later, so the
//!    credential is handed on ([`Admitted::Upgrade`]) and checked there.
//!
//! Pure: the shell reads the head and the socket's local address and acts
//! on the verdict; nothing here does IO.

use std::collections::BTreeSet;

use ::core::net::IpAddr;

use crate::grants::is_host_token;

/// The origin VS Code desktop's renderer sends (its workbench is served
/// from `vscode-file://vscode-app/...`): VS Code's agent-host WebSocket
/// client (`WebSocketClientTransport`) is the renderer's own `WebSocket`.
pub const VSCODE_DESKTOP_ORIGIN: &str = "vscode-file://vscode-app";

/// Most headers a request head may carry; more is a bad request.
const MAX_HEADERS: usize = 64;

/// What a request head says, as far as the front door cares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestHead {
    /// The request method (`GET`).
    pub method: String,
    /// The request target's path, without its query.
    pub path: String,
    /// Whether it asks to upgrade to a WebSocket (`Upgrade: websocket`).
    pub upgrade: bool,
    /// The `Host` header, as sent.
    pub host: Option<String>,
    /// The `Origin` header, as sent.
    pub origin: Option<String>,
    /// The credential it presents: an `Authorization: Bearer` token, else
    /// the `token` query parameter, else `tkn`. Never logged.
    pub credential: Option<String>,
}

/// Why a request head could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// Not yet a whole head (more bytes may complete it).
    Partial,
    /// Not an HTTP/1.x request head, or a header the front door reads
    /// (`Host`, `Origin`, `Authorization`) given twice or not UTF-8.
    Malformed,
}

/// Reads an HTTP/1.x request head (request line and headers, through the
/// blank line) with `httparse`. Returns the head and its length in bytes.
///
/// Errors: [`HeadError::Partial`] while the blank line has not come;
/// [`HeadError::Malformed`] for anything that is not a request head, a
/// version other than 1.x, or a `Host`, `Origin` or `Authorization` header
/// given twice (which a proxy and this door could read differently).
pub fn parse_head(bytes: &[u8]) -> Result<(RequestHead, usize), HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Err(HeadError::Partial),
        Err(_) => return Err(HeadError::Malformed),
    };
    let (Some(method), Some(target)) = (request.method, request.path) else { return Err(HeadError::Malformed) };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut head = RequestHead { method: method.to_owned(), path: path.to_owned(), ..RequestHead::default() };
    let mut bearer = None;
    for h in request.headers.iter() {
        let once = |slot: &mut Option<String>| -> Result<(), HeadError> {
            let value = std::str::from_utf8(h.value).map_err(|_| HeadError::Malformed)?.trim();
            if slot.replace(value.to_owned()).is_some() {
                return Err(HeadError::Malformed);
            }
            Ok(())
        };
        if h.name.eq_ignore_ascii_case("upgrade") {
            head.upgrade |= h.value.split(|b| *b == b',').any(|v| v.trim_ascii().eq_ignore_ascii_case(b"websocket"));
        } else if h.name.eq_ignore_ascii_case("host") {
            once(&mut head.host)?;
        } else if h.name.eq_ignore_ascii_case("origin") {
            once(&mut head.origin)?;
        } else if h.name.eq_ignore_ascii_case("authorization") {
            once(&mut bearer)?;
        }
    }
    let bearer = bearer.and_then(|value| {
        let (scheme, token) = value.split_once(' ')?;
        (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim().to_owned())
    });
    let from_query = |name: &str| {
        url::form_urlencoded::parse(query.as_bytes()).find(|(k, v)| k == name && !v.is_empty()).map(|(_, v)| v.into_owned())
    };
    head.credential = bearer.or_else(|| from_query("token")).or_else(|| from_query("tkn"));
    Ok((head, len))
}

/// A host name a request's `Host` may carry on any connection: a reverse
/// proxy's name in front of the daemon, or the name a remote listener is
/// reached by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostName {
    /// The name or address, lowercase (an IPv6 address without brackets).
    pub host: String,
    /// The port it must carry; `None`: any.
    pub port: Option<u16>,
}

impl HostName {
    /// Reads `name` or `name:port` (`[v6]:port` for an IPv6 address).
    ///
    /// Errors: empty, a character no host name has, or a bad port.
    pub fn parse(text: &str) -> Result<HostName, String> {
        let (host, port) = authority(text.trim()).ok_or_else(|| format!("{text:?} is not a host name, HOST or HOST:PORT (e.g. ahpd.example.com or ahpd.example.com:443)"))?;
        Ok(HostName { host, port })
    }
}

/// Splits an authority `host[:port]` (`[v6]` in brackets) into its host,
/// lowercase and without brackets, and its port; `None` for anything with a
/// character no authority has (userinfo, a path, spaces) or a bad port.
fn authority(text: &str) -> Option<(String, Option<u16>)> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']')) {
        return None;
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        v6.parse::<::core::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (v6, port)
    } else {
        match text.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    if host.is_empty() || host.contains(['[', ']']) {
        return None;
    }
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok().filter(|_| !p.starts_with('+'))?),
        None => None,
    };
    Some((host.to_ascii_lowercase(), port))
}

/// Normalizes an origin for comparison: a web origin (`http`, `https`,
/// `ws`, `wss`) as `scheme://host[:port]` with the scheme's default port
/// left out; any other (`vscode-file://vscode-app`) lowercased, without a
/// trailing slash. `None` for `null` and what is not an origin.
pub fn normalize_origin(text: &str) -> Option<String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("null") || text.is_empty() {
        return None;
    }
    let url = url::Url::parse(text).ok()?;
    match url.origin() {
        origin @ url::Origin::Tuple(..) => Some(origin.ascii_serialization()),
        url::Origin::Opaque(_) => {
            let (scheme, rest) = text.split_once("://")?;
            let rest = rest.trim_end_matches('/');
            (!scheme.is_empty() && !rest.is_empty() && !rest.contains(['/', '?', '#', '@'])).then(|| format!("{}://{}", scheme.to_ascii_lowercase(), rest.to_ascii_lowercase()))
        }
    }
}

/// Where a connection arrived: the local address of its socket (the one
/// the client dialled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// The local IP address (an IPv4-mapped IPv6 address counts as IPv4).
    pub ip: IpAddr,
    /// The local port.
    pub port: u16,
}

/// What the front door lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admitted {
    /// A plain HTTP request (`/healthz`, `/metrics`, ...).
    Http,
    /// A WebSocket upgrade, with the credential it presented (for a host
    /// with a users directory to sign the connection in by).
    Upgrade {
        /// The presented token, if any. Never logged.
        credential: Option<String>,
    },
}

/// Why the front door refused a request; answered on the HTTP request itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `Host` is none this listener answers to (DNS rebinding), or missing.
    ForeignHost,
    /// The upgrade came from a web page of another origin (as sent, cut to
    /// 200 bytes for the log).
    ForeignOrigin(String),
    /// The host requires a connection token and none was presented.
    MissingToken,
    /// The presented token is not the host's.
    WrongToken,
}

impl Refusal {
    /// The HTTP status line's code and phrase.
    pub fn status(&self) -> &'static str {
        match self {
            Refusal::ForeignHost | Refusal::ForeignOrigin(_) => "403 Forbidden",
            Refusal::MissingToken | Refusal::WrongToken => "401 Unauthorized",
        }
    }

    /// Extra response headers, each ending in CRLF.
    pub fn headers(&self) -> &'static str {
        match self {
            Refusal::ForeignHost | Refusal::ForeignOrigin(_) => "",
            Refusal::MissingToken => "WWW-Authenticate: Bearer realm=\"ahpd\"\r\n",
            Refusal::WrongToken => "WWW-Authenticate: Bearer realm=\"ahpd\", error=\"invalid_token\"\r\n",
        }
    }

    /// The response body: why, in words a person can act on.
    pub fn body(&self) -> &'static str {
        match self {
            Refusal::ForeignHost => "this host name is not one this daemon answers to (a DNS-rebinding page?); connect by a loopback name or address, or list the name in allowed_hosts\n",
            Refusal::ForeignOrigin(_) => "a web page of this origin may not drive this daemon; list the origin in allowed_origins if it should\n",
            Refusal::MissingToken => "a connection token is required: send it as Authorization: Bearer <token> or ?token=<token> (ahpd token prints it)\n",
            Refusal::WrongToken => "the connection token is wrong (ahpd token prints the right one)\n",
        }
    }

    /// The label `/metrics` counts it under (`ahpd_http_refused_total{reason}`).
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::ForeignHost => "host",
            Refusal::ForeignOrigin(_) => "origin",
            Refusal::MissingToken | Refusal::WrongToken => "token",
        }
    }
}

/// The front door's settings: what it lets through beyond loopback names,
/// and the token it asks for.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    /// Names a `Host` may carry besides the built-in ones (`allowed_hosts`).
    pub allowed_hosts: Vec<HostName>,
    /// Origins an upgrade may come from besides the daemon's own and VS
    /// Code desktop's, normalized ([`normalize_origin`]).
    pub allowed_origins: BTreeSet<String>,
    /// Lowercase hex SHA-256 of the connection token every upgrade must
    /// present; `None`: none required (a users directory signs connections
    /// in, or `--no-token`).
    pub token_sha256: Option<String>,
}

impl Gate {
    /// A gate allowing `allowed_hosts` and `allowed_origins` (as a person
    /// wrote them) and asking for the token whose SHA-256 is `token_sha256`.
    ///
    /// Errors: a host name or origin that cannot be read, named.
    pub fn new(allowed_hosts: &[String], allowed_origins: &[String], token_sha256: Option<String>) -> Result<Gate, String> {
        let allowed_hosts = allowed_hosts.iter().map(|h| HostName::parse(h)).collect::<Result<Vec<_>, _>>()?;
        let allowed_origins = allowed_origins
            .iter()
            .map(|o| normalize_origin(o).ok_or_else(|| format!("{o:?} is not an origin (scheme://host[:port], e.g. https://ahpd.example.com)")))
            .collect::<Result<BTreeSet<_>, _>>()?;
        Ok(Gate { allowed_hosts, allowed_origins, token_sha256 })
    }

    /// The front door's verdict on `head`, which arrived at `at`: Host,
    /// then Origin (upgrades only), then the connection token (upgrades
    /// only). The module docs give each rule.
    pub fn admit(&self, head: &RequestHead, at: Arrival) -> Result<Admitted, Refusal> {
        let Some(host) = head.host.as_deref().filter(|h| self.host_allowed(h, at)) else {
            return Err(Refusal::ForeignHost);
        };
        if !head.upgrade {
            return Ok(Admitted::Http);
        }
        if let Some(origin) = &head.origin {
            if !self.origin_allowed(origin, host) {
                return Err(Refusal::ForeignOrigin(origin.chars().take(200).collect()));
            }
        }
        if let Some(expected) = &self.token_sha256 {
            match &head.credential {
                None => return Err(Refusal::MissingToken),
                Some(token) if !is_host_token(token, expected) => return Err(Refusal::WrongToken),
                Some(_) => {}
            }
        }
        Ok(Admitted::Upgrade { credential: head.credential.clone() })
    }

    /// Whether a `Host` header of `host` is one a connection that arrived
    /// at `at` answers to (module docs, rule 1). The port is the listed
    /// name's where it names one; the daemon's own names take any, since a
    /// client that reaches them through a tunnel (`ssh -L 9765:...:8765`)
    /// dialled a port of its own, and a rebinding page is told apart by its
    /// name, not its port.
    pub fn host_allowed(&self, host: &str, at: Arrival) -> bool {
        let Some((name, port)) = authority(host) else { return false };
        let listed = self.allowed_hosts.iter().any(|h| h.host == name && h.port.is_none_or(|p| Some(p) == port));
        let local = at.ip.to_canonical();
        let own_name = match name.parse::<IpAddr>() {
            Ok(ip) if local.is_loopback() => ip.to_canonical().is_loopback(),
            Ok(ip) => ip.to_canonical() == local,
            Err(_) => local.is_loopback() && name == "localhost",
        };
        listed || own_name
    }

    /// Whether an upgrade addressed to `host` (a `Host` the gate takes) from
    /// a page of `origin` may drive the host (module docs, rule 2): VS Code
    /// desktop's, a listed one, or the daemon's own page, which is a web
    /// origin of the very host and port the upgrade is addressed to (a page
    /// of another local server, `http://localhost:3000`, is not).
    pub fn origin_allowed(&self, origin: &str, host: &str) -> bool {
        let Some(origin) = normalize_origin(origin) else { return false };
        if origin == VSCODE_DESKTOP_ORIGIN || self.allowed_origins.contains(&origin) {
            return true;
        }
        let Ok(url) = url::Url::parse(&origin) else { return false };
        if !matches!(url.scheme(), "http" | "https") {
            return false;
        }
        let (Some(page_host), Some((host, port))) = (url.host_str(), authority(host)) else { return false };
        let page_host = page_host.trim_start_matches('[').trim_end_matches(']');
        page_host == host && url.port_or_known_default() == Some(port.unwrap_or(80))
    }

    /// Whether a token is asked of every upgrade.
    pub fn requires_token(&self) -> bool {
        self.token_sha256.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grants::token_hash;
    use proptest::prelude::*;

    fn loopback(port: u16) -> Arrival {
        Arrival { ip: IpAddr::from([127, 0, 0, 1]), port }
    }

    fn head(text: &str) -> RequestHead {
        parse_head(text.as_bytes()).map(|(h, _)| h).unwrap_or_default()
    }

    fn upgrade(host: &str, extra: &str) -> RequestHead {
        head(&format!("GET /?a=1 HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n{extra}\r\n"))
    }

    #[test]
    fn heads_are_read() {
        let (h, len) = parse_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nrest").unwrap_or_default();
        assert_eq!((h.method.as_str(), h.path.as_str(), h.upgrade, len), ("GET", "/metrics", false, 34));
        let h = head("GET /?tkn=abc HTTP/1.1\r\nupgrade: WebSocket\r\nauthorization: bearer  xyz \r\n\r\n");
        assert!(h.upgrade);
        assert_eq!(h.credential.as_deref(), Some("xyz"), "the header wins over the query");
        assert_eq!(head("GET /?tkn=a%2Bb HTTP/1.1\r\n\r\n").credential.as_deref(), Some("a+b"));
        assert_eq!(head("GET /?token=t&tkn=k HTTP/1.1\r\n\r\n").credential.as_deref(), Some("t"));
        assert_eq!(head("GET /?token= HTTP/1.1\r\n\r\n").credential, None);
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\nHost: a\r\n"), Err(HeadError::Partial));
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), Err(HeadError::Malformed));
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\nOrigin: a\r\norigin: a\r\n\r\n"), Err(HeadError::Malformed));
        assert_eq!(parse_head(b"\x16\x03\x01 tls hello\r\n\r\n"), Err(HeadError::Malformed));
    }

    #[test]
    fn a_loopback_listener_takes_loopback_names() {
        let gate = Gate::default();
        for host in ["127.0.0.1:8765", "localhost:8765", "LOCALHOST:8765", "[::1]:8765", "127.1.2.3:8765", "localhost", "127.0.0.1:9765"] {
            assert!(gate.host_allowed(host, loopback(8765)), "{host}");
        }
        for host in ["evil.example:8765", "localhost.evil.example:8765", "evil.example@localhost:8765", "localhost:8765/x", "", "10.0.0.1:8765", "localhost:99999", "[::1"] {
            assert!(!gate.host_allowed(host, loopback(8765)), "{host}");
        }
    }

    #[test]
    fn a_remote_listener_takes_its_own_address_and_configured_names() {
        let at = Arrival { ip: IpAddr::from([10, 1, 2, 3]), port: 8765 };
        let gate = Gate::new(&["ahpd.example.com".to_owned(), "proxy.example:443".to_owned()], &[], None).unwrap_or_default();
        assert!(gate.host_allowed("10.1.2.3:8765", at));
        assert!(gate.host_allowed("ahpd.example.com:8765", at));
        assert!(gate.host_allowed("AHPD.example.com", at), "a listed name without a port: any port");
        assert!(gate.host_allowed("proxy.example:443", at));
        assert!(!gate.host_allowed("proxy.example:444", at));
        assert!(!gate.host_allowed("localhost:8765", at), "loopback names only on a loopback arrival");
        assert!(!gate.host_allowed("10.1.2.4:8765", at));
        assert!(!gate.host_allowed("rebind.evil.example:8765", at));
        let mapped = Arrival { ip: "::ffff:127.0.0.1".parse().unwrap_or(IpAddr::from([0, 0, 0, 0])), port: 8765 };
        assert!(gate.host_allowed("localhost:8765", mapped));
    }

    #[test]
    fn origins_are_the_daemons_own_vscodes_or_listed() {
        let gate = Gate::new(&[], &["https://App.Example:443/".to_owned(), "vscode-webview://abc".to_owned()], None).unwrap_or_default();
        for origin in ["http://localhost:8765", "https://localhost:8765", "vscode-file://vscode-app", "https://app.example", "vscode-webview://ABC/"] {
            assert!(gate.origin_allowed(origin, "localhost:8765"), "{origin}");
        }
        assert!(gate.origin_allowed("http://127.0.0.1:8765", "127.0.0.1:8765"));
        assert!(gate.origin_allowed("http://[::1]:8765", "[::1]:8765"));
        assert!(gate.origin_allowed("http://localhost", "localhost"));
        for origin in ["https://evil.example", "null", "http://localhost:8766", "http://localhost:3000", "http://127.0.0.1:8765", "http://localhost", "file://", "http://localhost:8765.evil.example", "ws://localhost:8765", ""] {
            assert!(!gate.origin_allowed(origin, "localhost:8765"), "{origin}");
        }
        assert!(Gate::new(&[], &["not an origin".to_owned()], None).is_err());
        assert!(Gate::new(&["a b".to_owned()], &[], None).is_err());
    }

    #[test]
    fn the_checks_run_host_then_origin_then_token() {
        let gate = Gate { token_sha256: Some(token_hash("secret")), ..Gate::default() };
        let at = loopback(8765);
        assert_eq!(gate.admit(&upgrade("evil.example:8765", "Origin: https://evil.example\r\n"), at), Err(Refusal::ForeignHost));
        assert_eq!(gate.admit(&upgrade("localhost:8765", "Origin: https://evil.example\r\n"), at), Err(Refusal::ForeignOrigin("https://evil.example".to_owned())));
        assert_eq!(gate.admit(&upgrade("localhost:8765", ""), at), Err(Refusal::MissingToken));
        assert_eq!(gate.admit(&upgrade("localhost:8765", "Authorization: Bearer nope\r\n"), at), Err(Refusal::WrongToken));
        assert_eq!(
            gate.admit(&upgrade("localhost:8765", "Authorization: Bearer secret\r\n"), at),
            Ok(Admitted::Upgrade { credential: Some("secret".to_owned()) })
        );
        assert!(gate.admit(&head("GET /?token=secret HTTP/1.1\r\nHost: localhost:8765\r\nUpgrade: websocket\r\nOrigin: vscode-file://vscode-app\r\n\r\n"), at).is_ok());
        assert_eq!(gate.admit(&head("GET /healthz HTTP/1.1\r\nHost: localhost:8765\r\n\r\n"), at), Ok(Admitted::Http), "plain HTTP needs no token");
        assert_eq!(gate.admit(&head("GET /healthz HTTP/1.1\r\n\r\n"), at), Err(Refusal::ForeignHost), "no Host at all");
        let open = Gate::default();
        assert_eq!(open.admit(&upgrade("localhost:8765", ""), at), Ok(Admitted::Upgrade { credential: None }));
    }

    proptest! {
        /// Whatever the bytes, reading a head never panics, and a head read
        /// whole is never longer than what was given.
        #[test]
        fn any_bytes_are_read_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok((_, len)) = parse_head(&bytes) {
                prop_assert!(len <= bytes.len());
            }
        }

        /// A Host the gate takes on a loopback arrival names loopback: no
        /// other name gets through, whatever its spelling.
        #[test]
        fn only_loopback_names_pass_on_loopback(host in "[a-zA-Z0-9.:\\[\\]@/_-]{0,40}", port in 1u16..) {
            let gate = Gate::default();
            if gate.host_allowed(&host, loopback(port)) {
                let (name, _) = authority(&host).unwrap_or_default();
                prop_assert!(name == "localhost" || name.parse::<IpAddr>().is_ok_and(|ip| ip.to_canonical().is_loopback()), "{host}");
            }
        }

        /// An upgrade the gate admits from a web page with nothing listed
        /// comes from VS Code desktop or from a page of the very authority
        /// it is addressed to, which is a loopback one.
        #[test]
        fn only_own_origins_pass(scheme in "(http|https|ws|file|vscode-file|null)", page in "[a-z0-9.\\[\\]:-]{0,30}", host in "[a-z0-9.\\[\\]:-]{0,30}") {
            let gate = Gate::default();
            let origin = format!("{scheme}://{page}");
            let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nOrigin: {origin}\r\n\r\n");
            let Ok((head, _)) = parse_head(request.as_bytes()) else { return Ok(()) };
            if gate.admit(&head, loopback(8765)).is_ok() {
                prop_assert!(gate.host_allowed(&host, loopback(8765)));
                let own = url::Url::parse(&origin).is_ok_and(|u| u.host_str().is_some_and(|h| authority(&host).is_some_and(|(name, _)| name == h.trim_matches(['[', ']']))));
                prop_assert!(origin == VSCODE_DESKTOP_ORIGIN || own, "{origin} for {host}");
            }
        }
    }
}
