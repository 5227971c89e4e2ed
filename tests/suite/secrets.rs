//! Secrets (issue 33, part 3): a token guardd reads from a root-only file reaches the approved
//! call's environment, and the call reaches a real HTTP server on loopback that requires it;
//! the caller's output and the audit log hold no form of the token; the same tool steered at
//! another port is stopped in the kernel before the token leaves; an argument holding the token
//! is quarantined; a policy that would let the token go elsewhere does not load.

use std::{
    io::{Read as _, Write as _},
    net::TcpListener,
    os::unix::fs::PermissionsExt as _,
    process::Command,
    sync::{Arc, Mutex},
};

use super::support::{self, Guardd, TempDir, ToolDir, output};

/// A server on loopback that answers 200 to a request bearing `token` (echoing it, as an API
/// that prints what it was sent would) and 401 otherwise; what it was sent, in order.
fn server(token: String) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut request = String::new();
            let mut buf = [0u8; 4096];
            while !request.contains("\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(n) if n > 0 => request.push_str(&String::from_utf8_lossy(&buf[..n])),
                    _ => break,
                }
            }
            let authorized = request.contains(&format!("Authorization: Bearer {token}\r\n"));
            log.lock().expect("log").push(request);
            let reply = if authorized {
                format!("HTTP/1.0 200 OK\r\n\r\nauthorized as {token}")
            } else {
                "HTTP/1.0 401 Unauthorized\r\n\r\nwho are you".to_owned()
            };
            let _ = conn.write_all(reply.as_bytes());
        }
    });
    (port, seen)
}

/// The token as the test tool prints it: raw, hex and base64 (what must never show).
fn forms(token: &str) -> Vec<String> {
    let hex: String = token.bytes().map(|b| format!("{b:02x}")).collect();
    let b64 = Command::new("base64")
        .arg("-w0")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().expect("stdin").write_all(token.as_bytes())?;
            c.wait_with_output()
        })
        .expect("base64");
    let b64 = String::from_utf8(b64.stdout).expect("ascii");
    // The middle of each form, so a partial mask would not pass either.
    vec![token.to_owned(), hex, b64]
        .into_iter()
        .map(|f| f[2..f.len() - 2].to_owned())
        .collect()
}

/// The test tool with `API_TOKEN` from secret `api`, which may go to `hosts` only.
fn policy(tool: &std::path::Path, token_file: &std::path::Path, port: u16) -> String {
    let slots: Vec<String> = (0..12).map(|i| format!("\"{{a{i}}}\"")).collect();
    let args: String = (0..12)
        .map(|i| format!("[tools.tt.args.a{i}]\ntype = \"string\"\nrequired = false\n"))
        .collect();
    format!(
        r#"
[settings]
disclose_reasons = true

[secrets.api]
source = "file:{file}"
hosts = ["127.0.0.1:{port}"]

[tools.tt]
tier = "low"
command = ["{tool}", {slots}]
env = {{ API_TOKEN = "{{secret:api}}" }}
{args}
[tools.tt.effects]
connect = ["127.0.0.1:{port}"]
"#,
        file = token_file.display(),
        tool = tool.display(),
        slots = slots.join(", "),
    )
}

#[test]
fn a_secret_reaches_the_approved_call_only_and_never_its_caller_or_the_log() {
    if !support::privileged(
        "a_secret_reaches_the_approved_call_only_and_never_its_caller_or_the_log",
    ) {
        return;
    }
    let tools = ToolDir::new("secrets");
    let dir = TempDir::new("secrets-key");
    let token = random_token();
    let file = dir.join("api.token");
    std::fs::write(&file, format!("{token}\n")).expect("token file");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let (port, seen) = server(token.clone());
    let (decoy, decoy_seen) = server("not-the-token".into());
    let guardd = Guardd::start(&policy(&tools.tool, &file, port));

    // The approved call: the server accepts the token and prints it back; the tool prints it
    // raw, hex, base64, and split across two writes on stderr.
    let addr = format!("127.0.0.1:{port}");
    let out = super::escape::call(
        &guardd,
        &[
            "bearer",
            &addr,
            "API_TOKEN",
            "--",
            "print-env",
            "API_TOKEN",
            "--",
            "print-env-hex",
            "API_TOKEN",
        ],
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout} {stderr}");
    assert!(stdout.contains("authorized as [secret:api]"), "{stdout}");
    assert!(stdout.contains("value [secret:api]"), "{stdout}");
    assert!(stdout.contains("hex [secret:api]"), "{stdout}");
    let seen_requests = seen.lock().expect("seen").clone();
    assert_eq!(seen_requests.len(), 1, "{seen_requests:?}");
    assert!(
        seen_requests[0].contains(&format!("Bearer {token}")),
        "the server got the token"
    );
    let out = super::escape::call(
        &guardd,
        &[
            "print-env-b64",
            "API_TOKEN",
            "--",
            "print-env-split",
            "API_TOKEN",
        ],
    );
    let (stdout2, stderr2) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout2} {stderr2}");
    assert!(stdout2.contains("b64 [secret:api]"), "{stdout2}");
    assert!(stderr2.contains("split [secret:api] end"), "{stderr2}");

    // Steered at another port: the kernel refuses the connect (EPERM from the cgroup
    // program) and guard stops the call; the decoy hears nothing.
    let steered = super::escape::call(
        &guardd,
        &["bearer", &format!("127.0.0.1:{decoy}"), "API_TOKEN"],
    );
    let said = String::from_utf8_lossy(&steered.stderr);
    assert_ne!(steered.status.code(), Some(0), "{steered:?}");
    assert!(said.contains("not approved to do"), "{steered:?}");
    assert!(
        decoy_seen.lock().expect("decoy").is_empty(),
        "the token left for another port"
    );

    // An argument holding the token: quarantined (held, as any quarantine: see
    // `a_secret_cannot_be_probed_through_check_or_exec`), never run, the row holds the mask only.
    let mut carried = guardd.exec("tt", &["a0=print-env", &format!("a1=x{token}y")]);
    carried.arg("--no-wait");
    let carried = output(carried);
    assert_eq!(carried.status.code(), Some(75), "{carried:?}");
    let rows = guardd.audit_rows();
    let quarantined = rows
        .iter()
        .rev()
        .find(|r| r["kind"] == "decision")
        .expect("a decision row");
    assert_eq!(
        quarantined["decision"]["decision"], "quarantine",
        "{quarantined}"
    );
    assert_eq!(
        quarantined["decision"]["check_name"], "secret",
        "{quarantined}"
    );
    assert!(
        quarantined.to_string().contains("[secret:api]"),
        "{quarantined}"
    );

    // The receipts say which secret each call was given, and which were masked.
    let receipts: Vec<_> = rows.iter().filter(|r| r["kind"] == "finished").collect();
    assert_eq!(receipts.len(), 3, "{rows:#?}");
    for r in &receipts {
        assert_eq!(
            r["effects_observed"]["secret_exposed"],
            serde_json::json!(["api"]),
            "{r}"
        );
    }
    assert_eq!(
        receipts[0]["effects_observed"]["secret_masked"],
        serde_json::json!(["api"])
    );

    // No form of the token anywhere the caller or the log keeps.
    let audit = std::fs::read_to_string(&guardd.audit).expect("audit");
    for f in forms(&token) {
        for (what, text) in [
            ("stdout", &stdout),
            ("stderr", &stderr),
            ("stdout", &stdout2),
            ("stderr", &stderr2),
            ("audit log", &audit),
        ] {
            assert!(!text.contains(&f), "{f} in the {what}: {text}");
        }
    }
}

#[test]
fn a_policy_that_could_take_a_secret_elsewhere_does_not_load() {
    let tools = ToolDir::new("secrets-load");
    let dir = TempDir::new("secrets-load-key");
    let file = dir.join("api.token");
    std::fs::write(&file, "abcdefgh-12345678").expect("token file");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let good = policy(&tools.tool, &file, 8443);
    let (ok, said) = check_config(&good);
    assert!(ok, "{said}");
    // A destination outside the secret's hosts.
    let (ok, said) = check_config(&good.replace(
        "connect = [\"127.0.0.1:8443\"]",
        "connect = [\"127.0.0.1:8443\", \"example.com:443\"]",
    ));
    assert!(!ok && said.contains("tools.tt.env.API_TOKEN"), "{said}");
    assert!(said.contains("example.com:443"), "{said}");
    // A tool that reads the workspace would run the agent's files with the value.
    let (ok, said) = check_config(
        &good
            .replace(
                "[tools.tt.effects]\n",
                "[tools.tt.effects]\nread = [\"{workspace}\"]\n",
            )
            .replace(
                "[settings]\n",
                "[workspaces]\nroots = [\"/srv\"]\n\n[settings]\n",
            ),
    );
    assert!(!ok && said.contains("workspace"), "{said}");
    // A command that expands the variable puts the value on a command line.
    let (ok, said) = check_config(&good.replace(
        "command = [\"",
        "command = [\"/bin/sh\", \"-c\", \"echo $API_TOKEN\", \"",
    ));
    assert!(!ok && said.contains("expands $API_TOKEN"), "{said}");
    // A file others may read.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let (ok, said) = check_config(&good);
    assert!(!ok && said.contains("secrets.api.source"), "{said}");
    assert!(said.contains("mode 644"), "{said}");
    // A secret the policy does not define.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let (ok, said) = check_config(&good.replace("{secret:api}", "{secret:other}"));
    assert!(!ok && said.contains("no [secrets.other]"), "{said}");
}

/// A host name that resolves to the host itself, other than `localhost`: the machine's own name
/// (in /etc/hosts on machines of this kind).
fn loopback_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim().to_owned();
    let internal = std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), 80))
        .ok()?
        .all(|a| a.ip().is_loopback());
    internal.then_some(name)
}

#[test]
fn a_name_answering_with_the_hosts_own_address_is_no_destination_unless_named() {
    let test = "a_name_answering_with_the_hosts_own_address_is_no_destination_unless_named";
    if !support::privileged(test) {
        return;
    }
    let Some(name) = loopback_name() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: this machine's name does not resolve to loopback"
        );
        eprintln!("skipping {test}: this machine's name does not resolve to loopback");
        return;
    };
    let s = super::escape::Setup::new();
    let (port, seen) = server("t".repeat(8));
    let named = format!("{name}:{port}");
    // Its name alone: the answer (127.0.0.1) is the host's own, refused before launch.
    let guardd = Guardd::start(&s.policy(&format!("connect = [\"{named}\"]"), ""));
    let out = super::escape::call(&guardd, &["connect", &named]);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(seen.lock().expect("seen").is_empty(), "the call connected");
    let audit = std::fs::read_to_string(&guardd.audit).expect("audit");
    assert!(audit.contains("DNS rebinding"), "{audit}");
    drop(guardd);
    // With the address named too, the name may stand for it.
    let both = format!("connect = [\"{named}\", \"127.0.0.1:{port}\"]");
    let guardd = Guardd::start(&s.policy(&both, ""));
    let out = super::escape::call(&guardd, &["connect", &named]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// `connect` takes networks (`127.0.0.0/8:PORT`): every address in one is a destination on that
/// port, in the kernel; another port is not; and a name answering inside it may stand for it.
#[test]
fn a_network_in_connect_is_every_address_in_it_on_its_port() {
    if !support::privileged("a_network_in_connect_is_every_address_in_it_on_its_port") {
        return;
    }
    let listener = TcpListener::bind("0.0.0.0:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            drop(conn);
        }
    });
    let other = TcpListener::bind("127.0.0.1:0").expect("bind");
    let other_port = other.local_addr().expect("addr").port();
    let s = super::escape::Setup::new();
    let effects = format!("connect = [\"127.0.0.0/8:{port}\"]\non_divergence = \"deny\"");
    let guardd = Guardd::start(&s.policy(&effects, ""));
    for addr in ["127.0.0.1", "127.0.0.2", "127.1.2.3"] {
        let out = super::escape::call(&guardd, &["connect", &format!("{addr}:{port}")]);
        assert_eq!(out.status.code(), Some(0), "{addr}: {out:?}");
    }
    let refused = super::escape::call(&guardd, &["connect", &format!("127.0.0.1:{other_port}")]);
    assert_ne!(refused.status.code(), Some(0), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("EPERM"),
        "{refused:?}"
    );
    // The machine's own name answers inside the network: it may stand for it.
    if let Some(name) = loopback_name() {
        let out = super::escape::call(&guardd, &["connect", &format!("{name}:{port}")]);
        assert_ne!(out.status.code(), Some(0), "a name not in connect: {out:?}");
        drop(guardd);
        let both = format!("connect = [\"{name}:{port}\", \"127.0.0.0/8:{port}\"]");
        let guardd = Guardd::start(&s.policy(&both, ""));
        let out = super::escape::call(&guardd, &["connect", &format!("{name}:{port}")]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    // A network written with host bits set is a load error.
    let (ok, said) = check_config(&s.policy("connect = [\"10.0.0.1/8:443\"]", ""));
    assert!(!ok && said.contains("host bits set"), "{said}");
    // Nor a network that holds a cloud metadata endpoint.
    let (ok, said) = check_config(&s.policy("connect = [\"0.0.0.0/0:80\"]", ""));
    assert!(!ok && said.contains("metadata"), "{said}");
}

/// `guardd --check-config` of a policy text: whether it would start, and what it said.
fn check_config(text: &str) -> (bool, String) {
    let dir = TempDir::new("secrets-check");
    let path = dir.join("policy.toml");
    std::fs::write(&path, text).expect("policy");
    let out = output({
        let mut c = Command::new(support::bin("guardd"));
        c.arg("--check-config").arg("--policy").arg(&path);
        c
    });
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    (out.status.success(), said)
}

/// A token of 32 characters, 24 of them random.
fn random_token() -> String {
    let mut bytes = [0u8; 12];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("urandom");
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("tok-{hex}-Zq9")
}

/// One `check` request as `uid`, from a real client process; its reply.
fn check_as(guardd: &Guardd, uid: u32, args: &serde_json::Value) -> serde_json::Value {
    let frame = serde_json::json!({"v": 1, "type": "check", "tool": "tt", "args": args});
    let script = "import socket,sys\n\
                  s=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\n\
                  s.sendall(sys.argv[2].encode()+b'\\n')\n\
                  print(s.makefile().readline(),end='')";
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script])
        .arg(&guardd.socket)
        .arg(frame.to_string());
    std::os::unix::process::CommandExt::uid(&mut cmd, uid);
    // The socket's group, for the caller (`nobody`'s is `nogroup`).
    std::os::unix::process::CommandExt::gid(&mut cmd, uid);
    let out = output(cmd);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// A caller who guesses pieces of a secret's value learns nothing from which piece matched
/// (issue 49: a client read a 32-character secret back in 35-49 checks, the reply naming the
/// argument that matched): a match is a quarantine like every other, naming nothing; every
/// check is an audit row; a call holding the value is held masked and cannot be approved; and
/// a caller that matches three times has all its calls refused for ten minutes.
#[test]
fn a_secret_cannot_be_probed_through_check_or_exec() {
    if !support::privileged("a_secret_cannot_be_probed_through_check_or_exec") {
        return;
    }
    let tools = ToolDir::new("secrets");
    let dir = TempDir::new("secrets-key");
    let token = random_token();
    let file = dir.join("api.token");
    std::fs::write(&file, format!("{token}\n")).expect("token file");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let guardd = super::approval::start(&policy(&tools.tool, &file, 9), &[]);
    let caller = super::approval::CALLER;

    // Eleven guesses and one true piece of the value, hex-encoded, as the first attack sent
    // them: a piece shorter than half the value is no match, so the answer is the tool's
    // (a run of 8 characters, then 4 bytes, answered `quarantine`: misses cost nothing, and a
    // second attack grouped 85,000 guesses per check to read a value back, a hit at a time).
    let hex: String = token.bytes().map(|b| format!("{b:02x}")).collect();
    let mut guesses = serde_json::Map::new();
    for i in 0..11 {
        guesses.insert(format!("a{i}"), format!("{:08x}", 0x1234_5678 + i).into());
    }
    guesses.insert("a11".into(), hex[8..16].into());
    let short = check_as(&guardd, caller, &guesses.clone().into());
    assert_eq!(short["decision"]["decision"], "allow", "{short}");
    let piece = |from: usize| serde_json::json!({ "a0": &token[from..from + token.len() - 1] });
    assert_eq!(
        check_as(&guardd, caller, &piece(1))["decision"]["decision"],
        "quarantine"
    );
    // Half the value, in hex, is one: held as any quarantine, naming nothing.
    guesses.insert("a11".into(), hex[8..8 + token.len()].into());
    let matched = check_as(&guardd, caller, &guesses.clone().into());
    let decision = &matched["decision"];
    assert_eq!(decision["decision"], "quarantine", "{matched}");
    assert_eq!(decision["check_name"], "quarantine", "{matched}");
    assert_eq!(decision["reason"], "held for review", "{matched}");
    assert!(decision["metadata"].get("arg").is_none(), "{matched}");
    assert!(decision["metadata"].get("stage").is_none(), "{matched}");
    assert!(matched["plan"].is_null(), "{matched}");

    // Both checks are rows; the admin's says which argument, masked.
    let checked: Vec<serde_json::Value> = guardd
        .audit_rows()
        .into_iter()
        .filter(|r| r["kind"] == "checked")
        .collect();
    assert_eq!(checked.len(), 3, "{checked:#?}");
    assert_eq!(checked[0]["decision"]["decision"], "allow");
    assert_eq!(checked[2]["decision"]["check_name"], "secret");
    assert_eq!(checked[2]["decision"]["metadata"]["arg"], "a11");
    assert_eq!(checked[2]["peer"]["uid"], caller);

    // An exec holding the value: held, masked everywhere, and no approval runs it.
    let mut held = guardd.exec("tt", &["a0=print-env", &format!("a1={token}")]);
    held.arg("--no-wait");
    std::os::unix::process::CommandExt::uid(&mut held, caller);
    std::os::unix::process::CommandExt::gid(&mut held, caller);
    let held = output(held);
    assert_eq!(held.status.code(), Some(75), "{held:?}");
    let id = String::from_utf8_lossy(&held.stdout).trim().to_owned();
    let pending = super::approval::held(&guardd, 1);
    assert_eq!(pending[0]["holds_secret"], true, "{pending:?}");
    assert_eq!(pending[0]["args"]["a1"], "[secret:api]", "{pending:?}");
    let approve = output(guardd.ctl(&["approve", &id]));
    assert!(!approve.status.success(), "{approve:?}");
    assert!(
        String::from_utf8_lossy(&approve.stderr).contains("nothing runs with one"),
        "{approve:?}"
    );
    assert_eq!(super::approval::held(&guardd, 1).len(), 1);
    let stored = Command::new("grep")
        .args(["-r", "-l", "-F", &token[4..token.len() - 4]])
        .arg(&guardd.dir.0)
        .output()
        .expect("grep");
    assert!(stored.stdout.is_empty(), "the value is kept: {stored:?}");

    // The third match (two checks and an exec) bars the caller: from then on every call of
    // that caller is refused, a check of nothing at all included; another caller's are not.
    let plain = serde_json::json!({"a0": "print-env"});
    let barred = check_as(&guardd, caller, &plain);
    assert_eq!(barred["decision"]["decision"], "block", "{barred}");
    assert_eq!(barred["decision"]["check_name"], "probes", "{barred}");
    let mut run = guardd.exec("tt", &["a0=exit", "a1=0"]);
    std::os::unix::process::CommandExt::uid(&mut run, caller);
    std::os::unix::process::CommandExt::gid(&mut run, caller);
    assert_eq!(output(run).status.code(), Some(126));
    assert_eq!(
        check_as(&guardd, 0, &plain)["decision"]["decision"],
        "allow"
    );
}
