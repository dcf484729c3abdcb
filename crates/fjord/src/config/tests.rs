use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::num::{NonZeroU16, NonZeroU32};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;

use super::*;

const PRIVATE: &str = "8ORXkaj7oBY7VNqXlh24nA0THm/QNWBpO0ARY8ZbbFk=";
const OWN_PUBLIC: &str = "SiA3E8QcT2q/KTrjvQQaIYaJzQdubGVYMpGPSg+y83k=";
const PEER_A: &str = "skfUPtEyZFtW5zaSYrDkMxrHtiZTaeUpTGkxGUedTnw=";
const PEER_B: &str = "E8wRGhvy3lWr0Af2fCIRgfelAV5e33j9hHLqRiccQk4=";
const PSK: &str = "OvxE/2hY021IFjH48f9CO07mMNaFtffRaVU2Izrm1j4=";

/// Resolves every host to 192.0.2.1, except `*.invalid`, which fails.
struct TestResolver;

impl Resolve for TestResolver {
    fn resolve(&self, host: &str, port: u16) -> io::Result<SocketAddr> {
        if host.ends_with(".invalid") {
            return Err(io::Error::other("test resolver: no such host"));
        }
        Ok(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            port,
        ))
    }
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse_with_resolver(text, "wg0.conf", &TestResolver)
}

fn parse_ok(text: &str) -> Config {
    match parse(text) {
        Ok(config) => config,
        Err(error) => panic!("unexpected error: {error}\n{text}"),
    }
}

fn error_of(text: &str) -> String {
    match parse(text) {
        Ok(_) => panic!("parsed, but should not have:\n{text}"),
        Err(error) => error.to_string(),
    }
}

/// A config with the interface section `interface_lines` and one peer with
/// the lines `peer_lines`.
fn with_peer(peer_lines: &str) -> String {
    format!("[Interface]\nPrivateKey = {PRIVATE}\n[Peer]\nPublicKey = {PEER_A}\n{peer_lines}\n")
}

fn with_interface(interface_lines: &str) -> String {
    format!("[Interface]\nPrivateKey = {PRIVATE}\n{interface_lines}\n")
}

fn cidrs(list: &[&str]) -> Vec<Cidr> {
    list.iter().map(|text| text.parse().unwrap()).collect()
}

fn verbatims(list: &[&str]) -> Vec<VerbatimValue> {
    list.iter()
        .map(|text| VerbatimValue::new(*text).unwrap())
        .collect()
}

// ---- golden files ----

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/config")
}

#[test]
fn golden_files() {
    let mut checked = 0;
    let mut entries: Vec<_> = std::fs::read_dir(data_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "conf"))
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_str().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let expected = std::fs::read_to_string(path.with_extension("expected"))
            .unwrap_or_else(|_| panic!("{name} has no .expected file"));
        let result = Config::parse_with_resolver(&text, name, &TestResolver);
        if name.starts_with("bad-") {
            let error = result.expect_err(name).to_string();
            assert_eq!(error, expected.trim_end(), "{name}");
            assert!(!error.contains('\n'), "{name}: message is not one line");
        } else {
            let config = result.unwrap_or_else(|error| panic!("{name}: {error}"));
            let written = config.to_wg_format();
            assert_eq!(written.as_str(), expected, "{name}: to_wg_format");
            let reread = Config::parse_with_resolver(&written, name, &TestResolver).unwrap();
            assert_eq!(reread, config, "{name}: round trip");
        }
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} golden files found");
}

#[test]
fn full_config_model() {
    let path = data_dir().join("valid-full.conf");
    let text = std::fs::read_to_string(path).unwrap();
    let config = parse_ok(&text);
    let interface = &config.interface;
    assert_eq!(interface.private_key.to_base64().as_str(), PRIVATE);
    assert_eq!(interface.listen_port, Some(51820));
    assert_eq!(interface.fwmark, NonZeroU32::new(42));
    assert_eq!(
        interface.addresses,
        cidrs(&["10.0.0.1/24", "fd00::1/64", "10.0.1.1/24"])
    );
    assert_eq!(interface.mtu().bytes(), 1380);
    let wg_quick = &interface.wg_quick;
    assert_eq!(
        wg_quick.dns,
        verbatims(&["10.0.0.53", "fd00::53", "example.internal"])
    );
    assert_eq!(
        wg_quick.table.as_ref().map(VerbatimValue::as_str),
        Some("off")
    );
    assert_eq!(wg_quick.pre_up, verbatims(&["echo 'pre up'"]));
    assert_eq!(wg_quick.post_up.len(), 2);
    assert_eq!(wg_quick.post_up[1].as_str(), "logger -t wg \"up %i\"");
    assert_eq!(wg_quick.pre_down, verbatims(&["true"]));
    assert_eq!(wg_quick.post_down.len(), 1);
    assert!(!wg_quick.save_config);

    assert_eq!(config.peers.len(), 3);
    let first = &config.peers[0];
    assert_eq!(first.public_key.to_base64(), PEER_A);
    assert_eq!(
        first
            .preshared_key
            .as_ref()
            .map(|psk| psk.to_base64())
            .as_deref()
            .map(String::as_str),
        Some(PSK)
    );
    assert_eq!(
        first.allowed_ips,
        cidrs(&["10.0.0.2/32", "fd00::2/128", "192.168.50.0/24"])
    );
    assert_eq!(
        first.endpoint.as_ref().map(Endpoint::address),
        Some("198.51.100.7:51820".parse().unwrap())
    );
    assert_eq!(first.persistent_keepalive.map(|k| k.secs().get()), Some(25));
    let second = &config.peers[1];
    assert_eq!(second.public_key.to_base64(), PEER_B);
    assert_eq!(second.allowed_ips, cidrs(&["10.0.0.3/32"]));
    assert_eq!(second.endpoint, None);
    assert_eq!(second.persistent_keepalive, None);
    let third = &config.peers[2];
    assert!(third.allowed_ips.is_empty());
    assert_eq!(
        third.endpoint.as_ref().map(Endpoint::address),
        Some("[2001:db8::7]:51821".parse().unwrap())
    );
}

// ---- reading rules ----

#[test]
fn comments_start_anywhere() {
    let config = parse_ok(&format!(
        "# leading comment\n[Interface] # after header\nPrivateKey = {PRIVATE} # after key\n\
         ListenPort = 7#no space\n   # indented comment\n\n"
    ));
    assert_eq!(config.interface.listen_port, Some(7));
}

#[test]
fn sections_and_keys_ignore_case() {
    let config = parse_ok(&format!(
        "[INTERFACE]\nPRIVATEKEY = {PRIVATE}\nlistenport = 1\nmtu = 1400\ndns = 1.1.1.1\n\
         [peer]\npublickey = {PEER_A}\nallowedips = 10.0.0.0/8\npersistentkeepalive = 5\n"
    ));
    assert_eq!(config.interface.listen_port, Some(1));
    assert_eq!(config.interface.mtu().bytes(), 1400);
    assert_eq!(config.peers[0].allowed_ips, cidrs(&["10.0.0.0/8"]));
}

#[test]
fn whitespace_is_trimmed_and_removed_as_wg_does() {
    // wg removes all whitespace from its own keys' lines.
    let config = parse_ok(&format!(
        "  [ Interface ]  \n\t PrivateKey\t=\t{PRIVATE}  \n Listen Port = 5 1\n\
         [Peer]\nPublicKey={PEER_A}\nAllowed IPs = 10.0.0.0 / 8 , fd00::/64\n"
    ));
    assert_eq!(config.interface.listen_port, Some(51));
    assert_eq!(
        config.peers[0].allowed_ips,
        cidrs(&["10.0.0.0/8", "fd00::/64"])
    );
    // wg-quick keys keep inner spaces in values, and in keys do not match.
    let config = parse_ok(&with_interface("PostUp =   ip link set  up  "));
    assert_eq!(
        config.interface.wg_quick.post_up,
        verbatims(&["ip link set  up"])
    );
    assert_eq!(
        error_of(&with_interface("Post Up = true")),
        "wg0.conf:3: unknown key 'Post Up' in [Interface]"
    );
}

#[test]
fn lists_accumulate() {
    let config = parse_ok(&format!(
        "[Interface]\nPrivateKey = {PRIVATE}\nAddress = 10.0.0.1/24,fd00::1/64\n\
         Address = 10.0.1.1/24 10.0.2.1/24\nDNS = 1.1.1.1,, 8.8.8.8\nDNS = search.example\n\
         [Peer]\nPublicKey = {PEER_A}\nAllowedIPs = 10.0.0.0/24\nAllowedIPs =\n\
         AllowedIPs = 10.1.0.0/24, 10.2.0.0/24\n"
    ));
    assert_eq!(
        config.interface.addresses,
        cidrs(&["10.0.0.1/24", "fd00::1/64", "10.0.1.1/24", "10.0.2.1/24"])
    );
    assert_eq!(
        config.interface.wg_quick.dns,
        verbatims(&["1.1.1.1", "8.8.8.8", "search.example"])
    );
    assert_eq!(
        config.peers[0].allowed_ips,
        cidrs(&["10.0.0.0/24", "10.1.0.0/24", "10.2.0.0/24"])
    );
}

#[test]
fn empty_allowed_ips_means_none() {
    let config = parse_ok(&with_peer("AllowedIPs ="));
    assert!(config.peers[0].allowed_ips.is_empty());
    assert_eq!(
        error_of(&with_peer("AllowedIPs = 10.0.0.0/8,")),
        "wg0.conf:5: AllowedIPs: empty entry in a comma-separated list"
    );
}

#[test]
fn hooks_repeat_and_empty_ones_are_skipped() {
    let config = parse_ok(&with_interface(
        "PreUp = a\nPreUp =\nPreUp = b ; c\nPostDown = d = e\nPreDown = f",
    ));
    let wg_quick = &config.interface.wg_quick;
    assert_eq!(wg_quick.pre_up, verbatims(&["a", "b ; c"]));
    assert_eq!(wg_quick.post_down, verbatims(&["d = e"]));
    assert_eq!(wg_quick.pre_down, verbatims(&["f"]));
    assert!(wg_quick.post_up.is_empty());
}

#[test]
fn crlf_and_bom_are_accepted() {
    let text = format!("\u{feff}[Interface]\r\nPrivateKey = {PRIVATE}\r\nTable = 1234\r\n");
    let config = parse_ok(&text);
    assert_eq!(config.interface.wg_quick.table.unwrap().as_str(), "1234");
}

#[test]
fn unknown_keys_and_sections_are_errors() {
    assert_eq!(
        error_of(&with_peer("Foo = bar")),
        "wg0.conf:5: unknown key 'Foo' in [Peer]"
    );
    assert_eq!(
        error_of(&with_interface("Endpoint = 192.0.2.1:1")),
        "wg0.conf:3: Endpoint belongs in [Peer], not in [Interface]"
    );
    assert_eq!(
        error_of(&with_peer("Address = 10.0.0.1/24")),
        "wg0.conf:5: Address belongs in [Interface], not in [Peer]"
    );
    assert_eq!(
        error_of(&with_interface("[Wat]")),
        "wg0.conf:3: unknown section '[Wat]' (expected [Interface], [Peer] or [Mesh])"
    );
    assert_eq!(
        error_of(&with_interface("[Peer] PublicKey = x")),
        "wg0.conf:3: a section header is a name in brackets, like [Interface] or [Peer]"
    );
}

#[test]
fn key_outside_section_is_an_error() {
    assert_eq!(
        error_of("ListenPort = 1\n[Interface]\n"),
        "wg0.conf:1: 'ListenPort' comes before any section; put it under [Interface] or [Peer]"
    );
}

#[test]
fn single_valued_keys_may_not_repeat() {
    assert_eq!(
        error_of(&with_peer("Endpoint = 192.0.2.1:1\nendpoint = 192.0.2.2:1")),
        "wg0.conf:6: Endpoint given twice in this [Peer] (first on line 5)"
    );
    assert_eq!(
        error_of(&with_peer(&format!("PublicKey = {PEER_A}"))),
        "wg0.conf:5: PublicKey given twice in this [Peer] (first on line 4)"
    );
    // The same key in two different peers is fine.
    parse_ok(&format!(
        "{}[Peer]\nPublicKey = {PEER_B}\nPersistentKeepalive = 1\n",
        with_peer("PersistentKeepalive = 1")
    ));
}

#[test]
fn whole_file_rules() {
    assert_eq!(error_of(""), "wg0.conf: no [Interface] section");
    assert_eq!(
        error_of("# nothing\n\n"),
        "wg0.conf: no [Interface] section"
    );
    assert_eq!(
        error_of("[Interface]\nListenPort = 1\n"),
        "wg0.conf: [Interface] has no PrivateKey"
    );
    assert_eq!(
        error_of(&with_interface("[Peer]\nAllowedIPs = 10.0.0.0/8")),
        "wg0.conf: [Peer] starting at line 3 has no PublicKey"
    );
    assert_eq!(
        error_of(&format!(
            "{}[Peer]\nPublicKey = {PEER_B}\n[Peer]\nPublicKey = {PEER_A}\n",
            with_peer("")
        )),
        format!("wg0.conf: two [Peer] sections with public key {PEER_A} (lines 3 and 8)")
    );
    assert_eq!(
        error_of(&with_interface(&format!(
            "[Peer]\nPublicKey = {OWN_PUBLIC}"
        ))),
        "wg0.conf: [Peer] starting at line 3 has the interface's own public key"
    );
    // Peers may come before the interface.
    let config = parse_ok(&format!(
        "[Peer]\nPublicKey = {PEER_A}\n[Interface]\nPrivateKey = {PRIVATE}\n"
    ));
    assert_eq!(config.peers.len(), 1);
}

// ---- values ----

#[test]
fn keys_are_validated() {
    assert_eq!(
        error_of(&with_peer("PresharedKey = short")),
        "wg0.conf:5: PresharedKey: a key is 44 base64 characters ending in '=', got 5 characters"
    );
    assert_eq!(
        error_of("[Interface]\nPrivateKey =\n"),
        "wg0.conf:2: PrivateKey: a key is 44 base64 characters ending in '=', got 0 characters"
    );
    // Non-canonical: the last digit carries bits past the 256th.
    let non_canonical = "skfUPtEyZFtW5zaSYrDkMxrHtiZTaeUpTGkxGUedTnx=";
    assert_eq!(
        error_of(&format!(
            "{}[Peer]\nPublicKey = {non_canonical}\n",
            with_interface("")
        )),
        "wg0.conf:5: PublicKey: not valid base64 (or not in canonical form)"
    );
}

#[test]
fn listen_port_range() {
    assert_eq!(parse_ok(&with_interface("")).interface.listen_port, None);
    assert_eq!(
        parse_ok(&with_interface("ListenPort = 0"))
            .interface
            .listen_port,
        Some(0)
    );
    let max = parse_ok(&with_interface("ListenPort = 65535"));
    assert_eq!(max.interface.listen_port, Some(65535));
    assert_eq!(
        error_of(&with_interface("ListenPort = 65536")),
        "wg0.conf:3: ListenPort: 65536 is out of range (0 to 65535)"
    );
    assert_eq!(
        error_of(&with_interface("ListenPort = +1")),
        "wg0.conf:3: ListenPort: '+1' is not a port number"
    );
    assert_eq!(
        error_of(&with_interface("ListenPort =")),
        "wg0.conf:3: ListenPort: '' is not a port number"
    );
}

#[test]
fn fallback_ports_in_interface_and_peer() {
    let config = parse_ok(&format!(
        "[Interface]\nPrivateKey = {PRIVATE}\nFallbackPort = 443\n\
         [Peer]\nPublicKey = {PEER_A}\nfallbackport = 8443\n"
    ));
    assert_eq!(config.interface.fallback_port.map(|p| p.get()), Some(443));
    assert_eq!(config.peers[0].fallback_port.map(|p| p.get()), Some(8443));
    assert_eq!(parse_ok(&with_interface("")).interface.fallback_port, None);
    assert_eq!(
        parse_ok(&with_interface("FallbackCarrier = tcp"))
            .interface
            .fallback_carrier,
        Some(FallbackCarrier::Tcp)
    );
    assert_eq!(
        error_of(&with_interface("FallbackCarrier = udp")),
        "wg0.conf:3: FallbackCarrier: 'udp' is not fake-tcp or tcp"
    );
    assert_eq!(
        error_of(&with_interface("FallbackPort = 0")),
        "wg0.conf:3: FallbackPort: 0 is out of range (1 to 65535)"
    );
    assert_eq!(
        error_of(&with_peer("FallbackPort = https")),
        "wg0.conf:5: FallbackPort: 'https' is not a port number"
    );
    assert_eq!(
        error_of(&with_peer("FallbackPort = 443\nFallbackPort = 443")),
        "wg0.conf:6: FallbackPort given twice in this [Peer] (first on line 5)"
    );
}

#[test]
fn metrics_address_is_an_ip_and_a_port() {
    assert_eq!(parse_ok(&with_interface("")).interface.metrics, None);
    let config = parse_ok(&with_interface("metrics = 127.0.0.1:9587"));
    let metrics = config.interface.metrics.expect("Metrics read");
    assert_eq!(
        metrics.socket_address(),
        SocketAddr::from(([127, 0, 0, 1], 9587))
    );
    assert!(
        config
            .to_wg_format()
            .contains("\nMetrics = 127.0.0.1:9587\n")
    );
    let v6 = parse_ok(&with_interface("Metrics = [::1]:9587"));
    assert_eq!(
        v6.interface.metrics.map(|m| m.to_string()),
        Some("[::1]:9587".to_string())
    );
    assert_eq!(
        error_of(&with_interface("Metrics = localhost:9587")),
        "wg0.conf:3: Metrics: 'localhost:9587' is not an IP address and port, like 127.0.0.1:9587"
    );
    assert_eq!(
        error_of(&with_interface("Metrics = 127.0.0.1")),
        "wg0.conf:3: Metrics: '127.0.0.1' is not an IP address and port, like 127.0.0.1:9587"
    );
    assert_eq!(
        error_of(&with_interface("Metrics = 127.0.0.1:0")),
        "wg0.conf:3: Metrics: 0 is out of range (1 to 65535)"
    );
    assert_eq!(
        error_of(&with_interface("Metrics = 127.0.0.1:70000")),
        "wg0.conf:3: Metrics: '127.0.0.1:70000' is not an IP address and port, like 127.0.0.1:9587"
    );
    assert_eq!(
        error_of(&with_interface(
            "Metrics = 127.0.0.1:1\nMetrics = 127.0.0.1:2"
        )),
        "wg0.conf:4: Metrics given twice in this [Interface] (first on line 3)"
    );
    assert_eq!(
        error_of(&with_peer("Metrics = 127.0.0.1:9587")),
        "wg0.conf:5: Metrics belongs in [Interface], not in [Peer]"
    );
}

#[test]
fn mtu_range_and_default() {
    let config = parse_ok(&with_interface(""));
    assert_eq!(config.interface.mtu, None);
    assert_eq!(config.interface.mtu(), DEFAULT_MTU);
    assert_eq!(DEFAULT_MTU.bytes(), 1420);
    assert_eq!(parse_ok(&with_interface("MTU =")).interface.mtu, None);
    assert_eq!(
        parse_ok(&with_interface("MTU = 576"))
            .interface
            .mtu()
            .bytes(),
        576
    );
    assert_eq!(
        parse_ok(&with_interface("MTU = 65535"))
            .interface
            .mtu()
            .bytes(),
        65535
    );
    assert_eq!(
        error_of(&with_interface("MTU = 575")),
        "wg0.conf:3: MTU: 575 is out of range (576 to 65535)"
    );
    assert_eq!(
        error_of(&with_interface("MTU = 99999999999")),
        "wg0.conf:3: MTU: 99999999999 is out of range (576 to 65535)"
    );
    assert!(Mtu::new(575).is_err());
    assert_eq!(Mtu::new(1280).unwrap().bytes(), 1280);
}

#[test]
fn cipher_setting() {
    assert_eq!(parse_ok(&with_interface("")).interface.cipher, None);
    assert_eq!(
        parse_ok(&with_interface("Cipher = chacha20-poly1305"))
            .interface
            .cipher,
        Some(CipherSetting::ChaCha20Poly1305)
    );
    assert_eq!(
        parse_ok(&with_interface("cipher = AUTO")).interface.cipher,
        Some(CipherSetting::Auto)
    );
    assert_eq!(
        error_of(&with_interface("Cipher = aes")),
        "wg0.conf:3: Cipher: 'aes' is not 'auto' or 'chacha20-poly1305'"
    );
    assert_eq!(
        CipherSetting::Auto.policy(true),
        fjord_proto::CipherPolicy::OfferAes256Gcm
    );
    assert_eq!(
        CipherSetting::Auto.policy(false),
        fjord_proto::CipherPolicy::ChaCha20Poly1305Only
    );
    assert_eq!(
        CipherSetting::ChaCha20Poly1305.policy(true),
        fjord_proto::CipherPolicy::ChaCha20Poly1305Only
    );
}

#[test]
fn mode_is_router_unless_switch_and_sets_the_default_mtu() {
    let router = parse_ok(&with_interface(""));
    assert_eq!(router.interface.mode, InterfaceMode::Router);
    assert_eq!(router.interface.mtu(), DEFAULT_MTU);
    let switch = parse_ok(&with_interface("mode = Switch"));
    assert_eq!(switch.interface.mode, InterfaceMode::Switch);
    assert_eq!(switch.interface.mtu(), DEFAULT_SWITCH_MTU);
    assert_eq!(DEFAULT_SWITCH_MTU.bytes() + 14 + 4, DEFAULT_MTU.bytes());
    let set = parse_ok(&with_interface("Mode = switch\nMTU = 9000"));
    assert_eq!(set.interface.mtu().bytes(), 9000);
    assert_eq!(
        parse_ok(&with_interface("Mode = router")).interface.mode,
        InterfaceMode::Router
    );
    assert_eq!(
        error_of(&with_interface("Mode = bridge")),
        "wg0.conf:3: Mode: 'bridge' is not router or switch"
    );
    assert!(
        switch.to_wg_format().contains("\nMode = switch\n"),
        "written back"
    );
    assert!(!router.to_wg_format().contains("Mode"));
}

#[test]
fn switch_mode_refuses_what_it_cannot_carry() {
    let peers = format!(
        "[Interface]\nPrivateKey = {PRIVATE}\nMode = switch\n\
         [Peer]\nPublicKey = {PEER_A}\nAllowedIPs =\n\
         [Peer]\nPublicKey = {PEER_B}\nEndpoint = 198.18.0.2:51820\nAllowedIPs = 198.19.0.2/32\n"
    );
    assert_eq!(
        error_of(&peers),
        "wg0.conf:10: AllowedIPs: not used in switch mode (Mode = switch routes frames by MAC address); remove it, or set Mode = router"
    );
    let mesh = format!(
        "[Interface]\nPrivateKey = {PRIVATE}\nMode = switch\n\n[Mesh]\n\
         Member = {OWN_PUBLIC} alpha 198.19.0.1/32\n"
    );
    assert_eq!(
        error_of(&mesh),
        "wg0.conf:3: Mode: switch mode works with [Peer] sections only, not with the [Mesh] at line 5"
    );
}

#[test]
fn compression_setting() {
    assert_eq!(parse_ok(&with_interface("")).interface.compression, None);
    assert_eq!(
        parse_ok(&with_interface("Compression = lz4"))
            .interface
            .compression,
        Some(CompressionSetting::Lz4)
    );
    assert_eq!(
        parse_ok(&with_interface("compression = OFF"))
            .interface
            .compression,
        Some(CompressionSetting::Off)
    );
    assert_eq!(
        parse_ok(&with_interface("Compression = ZSTD"))
            .interface
            .compression,
        Some(CompressionSetting::Zstd)
    );
    assert_eq!(
        error_of(&with_interface("Compression = gzip")),
        "wg0.conf:3: Compression: 'gzip' is not 'off', 'lz4' or 'zstd'"
    );
    assert_eq!(
        error_of(&with_interface("Compression = lz4\nCompression = off")),
        "wg0.conf:4: Compression given twice in this [Interface] (first on line 3)"
    );
    assert_eq!(
        CompressionSetting::default().policy(),
        fjord_proto::CompressionPolicy::Off
    );
    assert_eq!(
        CompressionSetting::Lz4.policy(),
        fjord_proto::CompressionPolicy::Lz4
    );
    assert_eq!(
        CompressionSetting::Zstd.policy(),
        fjord_proto::CompressionPolicy::Zstd
    );
}

#[test]
fn fwmark_forms() {
    let mark = |value: &str| parse(&with_interface(&format!("FwMark = {value}")));
    assert_eq!(mark("off").unwrap().interface.fwmark, None);
    assert_eq!(mark("OFF").unwrap().interface.fwmark, None);
    assert_eq!(mark("0").unwrap().interface.fwmark, None);
    assert_eq!(
        mark("51820").unwrap().interface.fwmark,
        NonZeroU32::new(51820)
    );
    assert_eq!(
        mark("0xca6c").unwrap().interface.fwmark,
        NonZeroU32::new(0xca6c)
    );
    assert_eq!(
        mark("0xffffffff").unwrap().interface.fwmark,
        NonZeroU32::new(u32::MAX)
    );
    assert_eq!(
        mark("4294967296").unwrap_err().to_string(),
        "wg0.conf:3: FwMark: 4294967296 is out of range (0 to 4294967295)"
    );
    assert!(mark("0x").is_err());
    assert!(mark("-1").is_err());
    assert!(mark("").is_err());
}

#[test]
fn persistent_keepalive_forms() {
    let keepalive = |value: &str| {
        parse(&with_peer(&format!("PersistentKeepalive = {value}")))
            .map(|config| config.peers[0].persistent_keepalive)
    };
    assert_eq!(keepalive("off").unwrap(), None);
    assert_eq!(keepalive("0").unwrap(), None);
    let one = keepalive("1").unwrap().unwrap();
    assert_eq!(one.as_duration(), std::time::Duration::from_secs(1));
    assert_eq!(keepalive("65535").unwrap().unwrap().secs().get(), 65535);
    assert!(keepalive("65536").is_err());
    assert!(keepalive("-1").is_err());
    assert!(keepalive("").is_err());
}

#[test]
fn save_config_and_table() {
    let config = parse_ok(&with_interface("SaveConfig = TRUE\nTable ="));
    assert!(config.interface.wg_quick.save_config);
    assert_eq!(config.interface.wg_quick.table, None);
    assert_eq!(
        error_of(&with_interface("SaveConfig =")),
        "wg0.conf:3: SaveConfig: '' is not true or false"
    );
    assert_eq!(
        error_of(&with_interface("Table = 1\nTable = 2")),
        "wg0.conf:4: Table given twice in this [Interface] (first on line 3)"
    );
}

#[test]
fn address_and_allowed_ips_use_cidr_rules() {
    let config = parse_ok(&with_interface("Address = 10.0.0.1, fd00::1"));
    assert_eq!(
        config.interface.addresses,
        cidrs(&["10.0.0.1/32", "fd00::1/128"])
    );
    assert_eq!(
        error_of(&with_peer("AllowedIPs = fd00::/129")),
        "wg0.conf:5: AllowedIPs: prefix length 129 is longer than 128 for this address family"
    );
    assert_eq!(
        error_of(&with_peer("AllowedIPs = 10.0.0.0/x")),
        "wg0.conf:5: AllowedIPs: 'x' is not a prefix length"
    );
}

#[test]
fn endpoints() {
    let endpoint = |value: &str| {
        parse(&with_peer(&format!("Endpoint = {value}")))
            .map(|config| config.peers[0].endpoint.clone().unwrap())
    };
    let v4 = endpoint("192.0.2.9:51820").unwrap();
    assert_eq!(v4.address(), "192.0.2.9:51820".parse().unwrap());
    assert_eq!(v4.as_str(), "192.0.2.9:51820");
    let v6 = endpoint("[2001:db8::9]:1").unwrap();
    assert_eq!(v6.address(), "[2001:db8::9]:1".parse().unwrap());
    let named = endpoint("vpn.example.com:443").unwrap();
    assert_eq!(named.address(), "192.0.2.1:443".parse().unwrap());
    assert_eq!(named.to_string(), "vpn.example.com:443");
    assert_eq!(
        endpoint("vpn.invalid:443").unwrap_err().to_string(),
        "wg0.conf:5: Endpoint: cannot resolve host 'vpn.invalid': test resolver: no such host"
    );
    for (bad, message) in [
        ("", "empty value"),
        ("192.0.2.9", "has no port"),
        ("192.0.2.9:", "has no port"),
        (":51820", "has no host"),
        ("[]:51820", "has no host"),
        ("[2001:db8::9]", "has no port"),
        ("[2001:db8::9]51820", "has no port"),
        ("2001:db8::9", "needs brackets"),
        ("192.0.2.9:65536", "is not a port number"),
        ("192.0.2.9:-1", "is not a port number"),
    ] {
        let error = endpoint(bad).unwrap_err().to_string();
        assert!(error.contains(message), "{bad}: {error}");
    }
}

#[test]
fn system_resolver_resolves_localhost() {
    let endpoint = Endpoint::parse("localhost:51820", &SystemResolver).unwrap();
    assert!(endpoint.address().ip().is_loopback());
    assert_eq!(endpoint.address().port(), 51820);
    assert_eq!(endpoint.as_str(), "localhost:51820");
}

#[test]
fn verbatim_values_survive_writing() {
    assert!(VerbatimValue::new("echo hi").is_ok());
    assert_eq!(VerbatimValue::new(""), Err(VerbatimValueError::Empty));
    assert_eq!(
        VerbatimValue::new(" a"),
        Err(VerbatimValueError::SurroundingWhitespace)
    );
    assert_eq!(
        VerbatimValue::new("a # b"),
        Err(VerbatimValueError::CommentCharacter)
    );
    assert_eq!(
        VerbatimValue::new("a\nb"),
        Err(VerbatimValueError::LineBreak)
    );
}

#[test]
fn quoted_text_is_shortened_and_escaped() {
    let long_key = "K".repeat(100);
    let error = error_of(&with_interface(&format!("{long_key} = 1")));
    assert_eq!(
        error,
        format!(
            "wg0.conf:3: unknown key '{}…' in [Interface]",
            "K".repeat(48)
        )
    );
    let error = error_of(&with_interface("Bad\u{1b}[31mKey = 1"));
    assert_eq!(
        error,
        "wg0.conf:3: unknown key 'Bad\\u{1b}[31mKey' in [Interface]"
    );
}

// ---- secrets ----

#[test]
fn debug_and_errors_never_show_secrets() {
    let config = parse_ok(&with_peer(&format!("PresharedKey = {PSK}")));
    let debug = format!("{config:?}");
    assert!(!debug.contains(&PRIVATE[..12]), "{debug}");
    assert!(!debug.contains(&PSK[..12]), "{debug}");
    // A slightly wrong private key is not echoed back.
    let almost = format!("{}x=", &PRIVATE[..42]);
    let error = error_of(&format!("[Interface]\nPrivateKey = {almost}\n"));
    assert!(!error.contains(&PRIVATE[..12]), "{error}");
}

#[test]
fn to_proto_fills_defaults() {
    let config = parse_ok(&with_peer(
        "Endpoint = 192.0.2.9:1\nPersistentKeepalive = 25",
    ));
    let proto = config.peers[0].to_proto();
    assert_eq!(proto.public_key.to_base64(), PEER_A);
    assert!(proto.preshared_key.is_zero());
    assert_eq!(proto.endpoint, Some("192.0.2.9:1".parse().unwrap()));
    assert_eq!(
        proto.persistent_keepalive,
        Some(std::time::Duration::from_secs(25))
    );
}

// ---- loading files ----

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("fjord-config-test-{}-{unique}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    fn write(&self, name: &str, contents: &[u8], mode: u32) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn load_reads_a_private_file() {
    let dir = TempDir::new();
    let path = dir.write(
        "wg0.conf",
        with_peer("Endpoint = 192.0.2.9:1").as_bytes(),
        0o600,
    );
    let config = Config::load(&path).unwrap();
    assert_eq!(config.peers.len(), 1);
    let path = dir.write("wg1.conf", with_interface("").as_bytes(), 0o400);
    assert!(Config::load(&path).is_ok());
}

#[test]
fn load_refuses_files_others_can_access() {
    let dir = TempDir::new();
    for mode in [0o644, 0o640, 0o604, 0o620, 0o602, 0o610] {
        let path = dir.write("wg0.conf", with_interface("").as_bytes(), mode);
        let error = Config::load(&path).unwrap_err();
        assert!(matches!(error, ConfigError::InsecurePermissions { .. }));
        let message = error.to_string();
        let shown = path.display();
        assert_eq!(
            message,
            format!(
                "{shown}: holds private keys but is accessible by group or others \
                 (mode {mode:04o}); run `chmod 600 {shown}`"
            )
        );
    }
}

#[test]
fn load_names_missing_files_and_bad_encoding() {
    let dir = TempDir::new();
    let missing = dir.0.join("nope.conf");
    let error = Config::load(&missing).unwrap_err();
    assert_eq!(
        error.io_error().map(io::Error::kind),
        Some(io::ErrorKind::NotFound)
    );
    let message = error.to_string();
    assert!(message.starts_with(&format!("cannot read {}: ", missing.display())));
    assert!(message.contains("No such file or directory"), "{message}");

    let mut bytes = with_interface("").into_bytes();
    bytes.extend_from_slice(b"# caf\xe9\n");
    let path = dir.write("latin1.conf", &bytes, 0o600);
    assert_eq!(
        Config::load(&path).unwrap_err().to_string(),
        format!("{}:4: not valid UTF-8", path.display())
    );
}

// ---- interface names ----

#[test]
fn interface_names_from_paths() {
    let name = |path: &str| interface_name_from_path(Path::new(path)).map(|n| n.to_string());
    assert_eq!(name("/etc/wireguard/wg0.conf").unwrap(), "wg0");
    assert_eq!(name("wg0.conf").unwrap(), "wg0");
    assert_eq!(name("fjord").unwrap(), "fjord");
    assert_eq!(name("/x/abcdefghijklmno.conf").unwrap(), "abcdefghijklmno");
    assert_eq!(
        name("/x/abcdefghijklmnop.conf").unwrap_err().to_string(),
        "interface name 'abcdefghijklmnop' is 16 bytes; Linux allows at most 15"
    );
    assert!(name("/x/wg 0.conf").is_err());
    assert!(name("/x/wg:0.conf").is_err());
    assert!(name("/x/wg\t0.conf").is_err());
    assert!(name("/x/...conf").is_err());
    assert!(matches!(
        interface_name_from_path(Path::new("/")),
        Err(InterfaceNameError::NoFileName { .. })
    ));
    assert_eq!(
        "..".parse::<InterfaceName>(),
        Err(InterfaceNameError::Reserved("..".into()))
    );
    assert_eq!("".parse::<InterfaceName>(), Err(InterfaceNameError::Empty));
}

// ---- properties ----

fn key_base64() -> impl Strategy<Value = String> {
    any::<[u8; 32]>().prop_map(|bytes| PresharedKey::from_bytes(bytes).to_base64().to_string())
}

fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|bits| IpAddr::V4(Ipv4Addr::from(bits))),
        any::<u128>().prop_map(|bits| IpAddr::V6(Ipv6Addr::from(bits))),
    ]
}

fn cidr() -> impl Strategy<Value = Cidr> {
    (ip(), 0u8..=128).prop_map(|(address, len)| {
        let max = if address.is_ipv4() { 32 } else { 128 };
        Cidr::new(address, len % (max + 1)).expect("prefix length is within range")
    })
}

/// Printable ASCII without `#`, no surrounding spaces.
fn verbatim_text() -> impl Strategy<Value = VerbatimValue> {
    "[!-\"$-~]([ -\"$-~]{0,30}[!-\"$-~])?"
        .prop_map(|text| VerbatimValue::new(text).expect("pattern excludes '#' and edge spaces"))
}

/// DNS items: no commas or spaces, since the list splits on them.
fn dns_item() -> impl Strategy<Value = VerbatimValue> {
    "[a-z0-9.:]{1,20}".prop_map(|text| VerbatimValue::new(text).expect("plain word"))
}

fn interface() -> impl Strategy<Value = InterfaceSection> {
    let wg_quick = (
        prop::collection::vec(dns_item(), 0..3),
        prop::option::of(verbatim_text()),
        prop::collection::vec(verbatim_text(), 0..3),
        prop::collection::vec(verbatim_text(), 0..3),
        prop::collection::vec(verbatim_text(), 0..3),
        prop::collection::vec(verbatim_text(), 0..3),
        any::<bool>(),
    )
        .prop_map(
            |(dns, table, pre_up, post_up, pre_down, post_down, save_config)| WgQuick {
                dns,
                table,
                pre_up,
                post_up,
                pre_down,
                post_down,
                save_config,
            },
        );
    (
        key_base64(),
        any::<Option<u16>>(),
        any::<Option<NonZeroU32>>(),
        prop::collection::vec(cidr(), 0..4),
        prop::option::of(Mtu::MIN..=u16::MAX),
        (
            prop::option::of(prop::sample::select(vec![
                CipherSetting::Auto,
                CipherSetting::ChaCha20Poly1305,
            ])),
            prop::option::of(prop::sample::select(vec![
                CompressionSetting::Off,
                CompressionSetting::Lz4,
            ])),
            prop::option::of((ip(), 1u16..).prop_map(|(ip, port)| {
                SocketAddr::new(ip, port)
                    .to_string()
                    .parse::<MetricsAddress>()
                    .expect("an address and a non-zero port")
            })),
        ),
        prop::sample::select(vec![InterfaceMode::Router, InterfaceMode::Switch]),
        wg_quick,
        any::<Option<NonZeroU16>>(),
        prop::option::of(prop_oneof![
            Just(FallbackCarrier::FakeTcp),
            Just(FallbackCarrier::Tcp)
        ]),
    )
        .prop_map(
            |(
                key,
                listen_port,
                fwmark,
                addresses,
                mtu,
                (cipher, compression, metrics),
                mode,
                wg_quick,
                fallback_port,
                carrier,
            )| {
                InterfaceSection {
                    private_key: PrivateKey::from_base64(&key).expect("encoded from 32 bytes"),
                    listen_port,
                    fwmark,
                    addresses,
                    mtu: mtu.map(|bytes| Mtu::new(bytes).expect("within range")),
                    cipher,
                    compression,
                    metrics,
                    mode,
                    fallback_port,
                    fallback_carrier: carrier,
                    wg_quick,
                }
            },
        )
}

fn endpoint() -> impl Strategy<Value = Endpoint> {
    (ip(), 1u16..).prop_map(|(ip, port)| Endpoint::from(SocketAddr::new(ip, port)))
}

fn peer() -> impl Strategy<Value = PeerSection> {
    (
        key_base64(),
        prop::option::of(key_base64()),
        prop::option::of(endpoint()),
        prop::collection::vec(cidr(), 0..5),
        any::<Option<NonZeroU16>>(),
        any::<Option<NonZeroU16>>(),
    )
        .prop_map(
            |(public, psk, endpoint, allowed_ips, keepalive, fallback_port)| PeerSection {
                public_key: public.parse().expect("encoded from 32 bytes"),
                preshared_key: psk.map(|psk| PresharedKey::from_base64(&psk).expect("encoded")),
                endpoint,
                allowed_ips,
                persistent_keepalive: keepalive.map(KeepaliveInterval::from_secs),
                fallback_port,
                groups: None,
            },
        )
}

fn config() -> impl Strategy<Value = Config> {
    (interface(), prop::collection::vec(peer(), 0..4)).prop_filter_map(
        "peer keys must be distinct from each other and the interface",
        |(interface, mut peers)| {
            if interface.mode == InterfaceMode::Switch {
                // Switch mode refuses AllowedIPs.
                for peer in &mut peers {
                    peer.allowed_ips.clear();
                }
            }
            let own = interface.private_key.public_key();
            let mut keys: Vec<_> = peers.iter().map(|peer| peer.public_key).collect();
            keys.push(own);
            keys.sort();
            keys.dedup();
            (keys.len() == peers.len() + 1).then_some(Config {
                interface,
                peers,
                mesh: None,
            })
        },
    )
}

/// Line fragments for building nearly-valid files.
fn fragment() -> impl Strategy<Value = String> {
    let fixed = prop::sample::select(vec![
        "[Peer]",
        "[Interface]",
        "[",
        "]",
        "=",
        " = ",
        "#",
        ",",
        " ",
        "\t",
        "PrivateKey",
        "PublicKey",
        "PresharedKey",
        "AllowedIPs = ",
        "Address = ",
        "DNS = ",
        "Endpoint = ",
        "[::1]:",
        "localhost:",
        "example.invalid:",
        "ListenPort",
        "FwMark = 0x",
        "MTU",
        "PersistentKeepalive = ",
        "off",
        "PostUp = ",
        "SaveConfig = true",
        "Table",
        "[Mesh]",
        "Member = ",
        "Network = ",
        "Bootstrap = ",
        "Domain = ",
        " node-1 ",
        " @ops",
        "10.0.0.1/24",
        "fd00::/64",
        "/33",
        "51820",
        "65536",
        PRIVATE,
        PEER_A,
        PEER_B,
        OWN_PUBLIC,
        PSK,
    ])
    .prop_map(str::to_string);
    prop_oneof![3 => fixed, 1 => "[ -~]{0,8}"]
}

fn fragment_lines() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::collection::vec(fragment(), 0..6).prop_map(|parts| parts.concat()),
        0..16,
    )
    .prop_map(|lines| lines.join("\n"))
}

/// Parsing never panics, errors are one line, and whatever parses writes
/// back to an equal config.
fn check_parse_is_total(text: &str) -> Result<(), TestCaseError> {
    match parse(text) {
        Ok(config) => {
            let written = config.to_wg_format();
            let reread = parse(&written);
            prop_assert_eq!(reread.ok(), Some(config));
        }
        Err(error) => {
            let message = error.to_string();
            prop_assert!(!message.contains('\n'), "multi-line message: {}", message);
        }
    }
    Ok(())
}

/// Only endpoints written as names are looked up again later.
#[test]
fn endpoints_written_as_names_keep_their_name_and_port() {
    let named = Endpoint::parse("vpn.example.test:51820", &TestResolver).unwrap();
    assert_eq!(named.name_and_port(), Some(("vpn.example.test", 51820)));
    for literal in ["198.18.0.1:51820", "[fd00::1]:51820"] {
        let endpoint = Endpoint::parse(literal, &TestResolver).unwrap();
        assert_eq!(endpoint.name_and_port(), None, "{literal}");
    }
}

/// A member list becomes the mesh's trust, this node's own entry its
/// record; a list without this node's key is refused with its line.
#[test]
fn member_lists_load_with_this_node_listed_and_not_without() {
    let text = format!(
        "[Interface]\nPrivateKey = {PRIVATE}\n\n[Mesh]\n\
         Member = {OWN_PUBLIC} alpha 198.19.0.1/32\nMember = {PEER_A} beta 198.19.0.2/32\n"
    );
    let mesh = parse(&text).unwrap().mesh.expect("a [Mesh] section");
    let here = std::path::Path::new(".");
    let loaded = mesh
        .load("wg0.conf", here, &OWN_PUBLIC.parse().unwrap(), 0)
        .unwrap();
    assert_eq!(loaded.certificate.name, "alpha");
    let fjord_mesh::Trust::Members(listed) = loaded.trust else {
        panic!("a member list, not a network key");
    };
    let names: Vec<&str> = listed.iter().map(|record| record.name.as_str()).collect();
    assert_eq!(names, ["alpha", "beta"]);
    let error = mesh
        .load("wg0.conf", here, &PEER_B.parse().unwrap(), 0)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("wg0.conf:4: Member: this interface's key {PEER_B} is not in the member list")
    );
}

/// `@name` words put a listed member in groups; they write back as
/// written, and a bad name is refused with its line.
#[test]
fn member_lines_carry_groups() {
    let text = format!(
        "[Interface]\nPrivateKey = {PRIVATE}\n\n[Mesh]\n\
         Member = {OWN_PUBLIC} alpha 198.19.0.1/32 @ops @db\nMember = {PEER_A} beta 198.19.0.2/32\n"
    );
    let config = parse(&text).unwrap();
    let mesh = config.mesh.as_ref().expect("a [Mesh] section");
    let groups: Vec<String> = mesh.members[0]
        .record
        .groups
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(groups, ["ops", "db"]);
    assert!(mesh.members[1].record.groups.is_empty());
    let written = config.to_wg_format();
    assert!(
        written.contains(&format!(
            "Member = {OWN_PUBLIC} alpha 198.19.0.1/32 @ops @db\n"
        )),
        "{}",
        *written
    );
    assert_eq!(parse(&written).unwrap(), config);
    for (bad, problem) in [
        ("@Ops", "group `Ops`: a group name is 1 to 31 characters"),
        ("@", "group ``"),
        ("@db @db", "group `db` is named twice"),
    ] {
        let text = format!(
            "[Interface]\nPrivateKey = {PRIVATE}\n\n[Mesh]\nMember = {OWN_PUBLIC} alpha 198.19.0.1/32 {bad}\n"
        );
        let error = parse(&text).unwrap_err().to_string();
        assert!(error.starts_with("wg0.conf:5: Member"), "{error}");
        assert!(error.contains(problem), "{bad}: {error}");
    }
}

/// `Groups` puts a configured peer in groups of the network policy; it
/// writes back as written, and a bad or repeated name is refused with
/// its line.
#[test]
fn peer_groups_are_read_written_and_checked() {
    let text = format!(
        "[Interface]\nPrivateKey = {PRIVATE}\n\n[Peer]\nPublicKey = {PEER_A}\nGroups = ops, db\n\n\
         [Peer]\nPublicKey = {PEER_B}\n"
    );
    let config = parse(&text).unwrap();
    let groups: Vec<String> = config.peers[0]
        .groups
        .iter()
        .flatten()
        .map(ToString::to_string)
        .collect();
    assert_eq!(groups, ["ops", "db"]);
    assert_eq!(config.peers[1].groups, None);
    let written = config.to_wg_format();
    assert!(written.contains("Groups = ops, db\n"), "{}", *written);
    assert_eq!(parse(&written).unwrap(), config);
    for (bad, problem) in [
        ("Ops", "group `Ops`: a group name is 1 to 31 characters"),
        ("db, db", "group `db` is named twice"),
        ("ops,,db", "empty"),
    ] {
        let text = format!(
            "[Interface]\nPrivateKey = {PRIVATE}\n\n[Peer]\nPublicKey = {PEER_A}\nGroups = {bad}\n"
        );
        let error = parse(&text).unwrap_err().to_string();
        assert!(error.starts_with("wg0.conf:6: Groups"), "{error}");
        assert!(error.contains(problem), "{bad}: {error}");
    }
}

/// `Domain` is a DNS name, kept in lower case and written back; a bad one
/// names its line.
#[test]
fn mesh_domains_are_dns_names() {
    let members = format!(
        "[Interface]\nPrivateKey = {PRIVATE}\n\n[Mesh]\nMember = {OWN_PUBLIC} alpha 198.19.0.1/32\n"
    );
    let config = parse_ok(&format!("{members}Domain = Mesh.Example.\n"));
    let domain = config.mesh.as_ref().and_then(|mesh| mesh.domain.as_ref());
    assert_eq!(
        domain.map(ToString::to_string).as_deref(),
        Some("mesh.example")
    );
    assert!(config.to_wg_format().contains("Domain = mesh.example\n"));
    assert_eq!(parse_ok(&members).mesh.and_then(|mesh| mesh.domain), None);
    let error = parse(&format!("{members}Domain = mesh_example\n")).unwrap_err();
    assert_eq!(
        error.to_string(),
        "wg0.conf:6: Domain: 'mesh_example': not a DNS name (letters, digits and hyphens in dot-separated labels of at most 63 bytes)"
    );
}

proptest! {
    #[test]
    fn round_trip_through_wg_format(config in config()) {
        let written = config.to_wg_format();
        let reread = Config::parse_with_resolver(&written, "roundtrip", &TestResolver);
        let reread = reread.map_err(|error| TestCaseError::fail(format!("{error}\n{}", *written)))?;
        prop_assert_eq!(&reread, &config);
        let rewritten = reread.to_wg_format();
        prop_assert_eq!(rewritten.as_str(), written.as_str());
    }

    #[test]
    fn parse_never_panics_on_arbitrary_text(text in ".*") {
        check_parse_is_total(&text)?;
    }

    #[test]
    fn parse_never_panics_on_config_like_lines(text in fragment_lines()) {
        check_parse_is_total(&text)?;
    }

    #[test]
    fn parse_never_panics_after_a_valid_prefix(text in fragment_lines()) {
        check_parse_is_total(&format!("[Interface]\nPrivateKey = {PRIVATE}\n{text}"))?;
    }
}

/// `Policy` names the network's signed policy: read and verified with the
/// certificate; a text changed after signing is refused with the file
/// and line the problem is on, under the `Policy` key's line.
#[test]
fn a_policy_file_is_verified_against_the_network_and_refused_with_its_line() {
    let secret = fjord_mesh::NetworkSecret::from_seed([5; 32]);
    let own: fjord_proto::PublicKey = OWN_PUBLIC.parse().unwrap();
    let address: fjord_mesh::Cidr = "198.19.0.1/32".parse().unwrap();
    let certificate = secret.sign(own, "alpha", &[address], 0, 1_000).unwrap();
    let directory = std::env::temp_dir().join(format!("fjord-policy-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    std::fs::write(directory.join("node.cert"), certificate.to_base64()).unwrap();
    let policy = "version 4\nallow from group ops to any port 22/tcp\n";
    let signed = fjord_mesh::policy::SignedPolicy::sign(policy.as_bytes(), &secret).unwrap();
    std::fs::write(directory.join("policy.signed"), signed.text()).unwrap();
    let text = format!(
        "[Interface]\nPrivateKey = {PRIVATE}\n\n[Mesh]\nNetwork = {}\n\
         Certificate = node.cert\nPolicy = policy.signed\n",
        secret.public_key()
    );
    let mesh = parse(&text).unwrap().mesh.expect("a [Mesh] section");
    let loaded = mesh.load("wg0.conf", &directory, &own, 10);
    let tampered = String::from_utf8(signed.text().to_vec())
        .unwrap()
        .replace("port 22/tcp", "port 1-65535/tcp");
    std::fs::write(directory.join("policy.signed"), tampered).unwrap();
    let refused = mesh.load("wg0.conf", &directory, &own, 10);
    std::fs::remove_dir_all(&directory).unwrap();

    let loaded = loaded.unwrap().policy.expect("the policy");
    assert_eq!(loaded.policy.version(), 4);
    assert_eq!(loaded.policy.rules().len(), 1);
    let message = refused.unwrap_err().to_string();
    assert!(
        message.starts_with("wg0.conf:7: Policy: policy.signed:3: "),
        "{message}"
    );
}

/// `ExitNode` names a member by its certificate name, is written back,
/// and a name no certificate can carry names its line; given twice, the
/// second line is refused.
#[test]
fn mesh_exit_nodes_are_member_names() {
    let members = format!(
        "[Interface]\nPrivateKey = {PRIVATE}\n\n[Mesh]\nMember = {OWN_PUBLIC} alpha 198.19.0.1/32\n"
    );
    let config = parse_ok(&format!("{members}ExitNode = gw-1\n"));
    let exit_node = config.mesh.as_ref().and_then(|mesh| mesh.exit_node.clone());
    assert_eq!(exit_node.as_deref(), Some("gw-1"));
    assert!(config.to_wg_format().contains("ExitNode = gw-1\n"));
    assert_eq!(
        parse_ok(&members).mesh.and_then(|mesh| mesh.exit_node),
        None
    );
    let error = parse(&format!("{members}ExitNode = gw 1\n")).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("wg0.conf:6: ExitNode: 'gw 1' is not a member name"),
        "{error}"
    );
    let twice = parse(&format!("{members}ExitNode = a\nExitNode = b\n")).unwrap_err();
    assert!(twice.to_string().starts_with("wg0.conf:7: "), "{twice}");
    let typo = parse(&format!("{members}ExitNod = a\n")).unwrap_err();
    assert!(typo.to_string().starts_with("wg0.conf:6: "), "{typo}");
}

/// `EagerSessions` and `IdleTimeout` are read, written back, default when
/// absent, and a count or a number of seconds out of range names its line.
#[test]
fn mesh_sessions_on_demand_keys_are_counts_and_seconds() {
    let members = format!(
        "[Interface]\nPrivateKey = {PRIVATE}\n\n[Mesh]\nMember = {OWN_PUBLIC} alpha 198.19.0.1/32\n"
    );
    let config = parse_ok(&format!("{members}EagerSessions = 8\nIdleTimeout = 300\n"));
    let mesh = config.mesh.as_ref().unwrap();
    assert_eq!(mesh.eager_sessions, Some(8));
    assert_eq!(mesh.idle_timeout, Some(std::time::Duration::from_secs(300)));
    let written = config.to_wg_format();
    assert!(written.contains("EagerSessions = 8\nIdleTimeout = 300\n"));
    assert_eq!(parse_ok(&written).mesh, config.mesh);
    let defaults = parse_ok(&members).mesh.unwrap();
    assert_eq!(
        (defaults.eager_sessions, defaults.idle_timeout),
        (None, None)
    );
    // Zero members: sessions always on demand.
    assert_eq!(
        parse_ok(&format!("{members}EagerSessions = 0\n"))
            .mesh
            .and_then(|mesh| mesh.eager_sessions),
        Some(0)
    );
    for (line, expected) in [
        (
            "EagerSessions = many",
            "wg0.conf:6: EagerSessions: 'many' is not a number of members",
        ),
        (
            "EagerSessions = 100001",
            "wg0.conf:6: EagerSessions: 100001 is out of range (0 to 100000)",
        ),
        (
            "IdleTimeout = 1m",
            "wg0.conf:6: IdleTimeout: '1m' is not a number of seconds",
        ),
        (
            "IdleTimeout = 0",
            "wg0.conf:6: IdleTimeout: 0 is out of range (1 to 86400)",
        ),
    ] {
        let error = parse(&format!("{members}{line}\n")).unwrap_err();
        assert!(error.to_string().starts_with(expected), "{error}");
    }
    let twice = parse(&format!("{members}IdleTimeout = 5\nIdleTimeout = 6\n")).unwrap_err();
    assert!(twice.to_string().starts_with("wg0.conf:7: "), "{twice}");
}
