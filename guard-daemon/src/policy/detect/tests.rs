//! The detectors on what they must find and what they must not.

use super::*;

fn finds(d: Detector, s: &str) -> Vec<String> {
    let mut v = Vec::new();
    d.find(s, &mut v);
    v.iter().map(|h| s[h.range.clone()].to_string()).collect()
}

#[test]
fn credit_card_needs_luhn() {
    assert_eq!(
        finds(Detector::CreditCard, "card 4111 1111 1111 1111."),
        ["4111 1111 1111 1111"]
    );
    assert_eq!(
        finds(Detector::CreditCard, "4539578763621486"),
        ["4539578763621486"]
    );
    // Near misses: one digit off fails Luhn; placeholders; a longer digit run.
    assert!(finds(Detector::CreditCard, "4111111111111112").is_empty());
    assert!(finds(Detector::CreditCard, "0000000000000000").is_empty());
    assert!(finds(Detector::CreditCard, "order 12345678901234567890123").is_empty());
}

#[test]
fn iban_needs_mod97() {
    assert_eq!(
        finds(Detector::Iban, "pay GB82 WEST 1234 5698 7654 32 now"),
        ["GB82 WEST 1234 5698 7654 32"]
    );
    assert_eq!(
        finds(Detector::Iban, "CH9300762011623852957"),
        ["CH9300762011623852957"]
    );
    assert!(finds(Detector::Iban, "GB83WEST12345698765432").is_empty());
    assert!(finds(Detector::Iban, "XX00ABCDEFGHIJKLMNOP").is_empty());
}

#[test]
fn aws_keys() {
    assert_eq!(
        finds(Detector::AwsAccessKey, "key=AKIAIOSFODNN7EXAMPLE"),
        ["AKIAIOSFODNN7EXAMPLE"]
    );
    assert_eq!(
        finds(Detector::AwsAccessKey, "ASIAY34FZKBOKMUTVV7A"),
        ["ASIAY34FZKBOKMUTVV7A"]
    );
    // 8 and 1 are not base32; too short; embedded in a longer word.
    assert!(finds(Detector::AwsAccessKey, "AKIAIOSFODNN8EXAMPL1").is_empty());
    assert!(finds(Detector::AwsAccessKey, "AKIAIOSFODNN7EXAMP").is_empty());
    assert!(finds(Detector::AwsAccessKey, "XAKIAIOSFODNN7EXAMPLE").is_empty());
}

#[test]
fn github_tokens() {
    let t = format!("ghp_{}", "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8");
    assert_eq!(finds(Detector::GithubToken, &format!("token {t} end")), [t]);
    let pat = format!("github_pat_{}_{}", "A".repeat(22), "b".repeat(59));
    assert_eq!(finds(Detector::GithubToken, &pat), [pat.as_str()]);
    assert!(finds(Detector::GithubToken, "ghp_tooshort123").is_empty());
    assert!(finds(Detector::GithubToken, &format!("ghx_{}", "a".repeat(36))).is_empty());
}

#[test]
fn private_keys() {
    let line = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun";
    let k = format!(
        "-----BEGIN RSA PRIVATE KEY-----\n{line}\n{line}\nVLPHCo==\n-----END RSA PRIVATE KEY-----"
    );
    assert_eq!(
        finds(Detector::PrivateKey, &format!("x {k} y")),
        [k.as_str()]
    );
    let encrypted = format!(
        "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n\
         DEK-Info: AES-128-CBC,0A1B2C3D4E5F60718293A4B5C6D7E8F9\n\n{line}\n\
         -----END RSA PRIVATE KEY-----"
    );
    assert_eq!(
        finds(Detector::PrivateKey, &encrypted),
        [encrypted.as_str()]
    );
    // OpenSSH's 70-character lines, and an Ed25519 key's one line.
    let ssh = format!(
        "-----BEGIN OPENSSH PRIVATE KEY-----\n{}\n{}\n-----END OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
        "QyNTUxOQAAACBPa3ZlcmUgbm90IGEga2V5IGp1c3QgYSB0ZXN0AAAAAA=="
    );
    assert_eq!(finds(Detector::PrivateKey, &ssh), [ssh.as_str()]);
    assert!(finds(Detector::PrivateKey, "-----BEGIN PUBLIC KEY-----\nabc").is_empty());
}

/// What follows a BEGIN line is part of the find only when it is a key: a find must never
/// cover text an approver or the log needs to read (the hidden-command attack, issue 49).
#[test]
fn a_private_key_find_covers_the_key_and_nothing_else() {
    let begin = "-----BEGIN PRIVATE KEY-----";
    let hidden = format!("echo build ok # {begin}\ntouch MARK");
    assert_eq!(finds(Detector::PrivateKey, &hidden), [begin]);
    let truncated = format!("{begin}\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC");
    assert_eq!(finds(Detector::PrivateKey, &truncated), [begin]);
    // Text between BEGIN and END that is no base64 line: the BEGIN line alone.
    let smuggled = format!("{begin}\nrm -rf ~\n-----END PRIVATE KEY-----");
    assert_eq!(finds(Detector::PrivateKey, &smuggled), [begin]);
    // An END of another label: the BEGIN line alone.
    let mixed = format!("{begin}\nMIIE\n-----END RSA PRIVATE KEY-----\nrm x");
    assert_eq!(finds(Detector::PrivateKey, &mixed), [begin]);
    // An outside pass: a "header line" and a "base64 line" bash runs as commands.
    let header = format!(
        "{begin}\nProc-Type: 4,ENCRYPTED; echo HIDDEN > hidden.txt; id\n\n/usr/bin/uname\n\
         -----END PRIVATE KEY-----"
    );
    assert_eq!(finds(Detector::PrivateKey, &header), [begin]);
    let command = format!("{begin}\n/usr/bin/uname\n-----END PRIVATE KEY-----");
    assert_eq!(finds(Detector::PrivateKey, &command), [begin]);
}

#[test]
fn jwts_need_a_json_header() {
    let jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
    assert_eq!(finds(Detector::Jwt, &format!("Bearer {jwt}")), [jwt]);
    // eyJ-prefixed but the header is not JSON with alg.
    assert!(finds(Detector::Jwt, "eyJub3RqC29u.abc.def").is_empty());
    assert!(finds(Detector::Jwt, "eyJmb28iOjF9.eyJ.x").is_empty());
}

#[test]
fn emails_phones_ips() {
    assert_eq!(
        finds(Detector::Email, "to alice@mail.com, bob"),
        ["alice@mail.com"]
    );
    assert!(finds(Detector::Email, "user@localhost").is_empty());
    assert_eq!(
        finds(Detector::Phone, "call +41 44 123 45 67 today"),
        ["+41 44 123 45 67"]
    );
    assert!(finds(Detector::Phone, "room 12 34").is_empty());
    assert_eq!(finds(Detector::Ipv4, "host 10.0.0.1."), ["10.0.0.1"]);
    assert!(finds(Detector::Ipv4, "version 1.2.3.400").is_empty());
    assert!(finds(Detector::Ipv4, "1.2.3.4.5").is_empty());
    assert_eq!(
        finds(Detector::Ipv6, "addr 2001:db8::1 up"),
        ["2001:db8::1"]
    );
    assert!(finds(Detector::Ipv6, "at 12:30:45").is_empty());
}

#[test]
fn secrets_by_entropy() {
    assert_eq!(
        finds(
            Detector::Secret,
            "key: wJalrXUtnFEMI7K7MDENGbPxRfiCYEXAMPLEKEY"
        ),
        ["wJalrXUtnFEMI7K7MDENGbPxRfiCYEXAMPLEKEY"]
    );
    assert!(finds(Detector::Secret, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaa").is_empty());
    assert!(finds(Detector::Secret, "this_is_a_long_variable_name").is_empty());
    assert!(finds(Detector::Secret, "short9Xy").is_empty());
}

#[test]
fn names_round_trip() {
    for d in Detector::ALL {
        assert_eq!(Detector::from_name(d.name()), Some(d));
    }
    assert!(DetectorSet::SECRET_CLASS.contains(Detector::Jwt));
    assert!(!DetectorSet::SECRET_CLASS.contains(Detector::Email));
}
