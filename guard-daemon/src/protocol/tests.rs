//! Frames read as the protocol says: strict JSON, one request a frame, each error naming its field.

use super::*;

fn err(frame: &str) -> ProtocolError {
    parse_request(frame.as_bytes()).expect_err("should be rejected")
}

#[test]
fn parses_each_request_type() {
    let r =
        parse_request(br#"{"v":1,"type":"exec","tool":"read_file","args":{"path":"/x"}}"#).unwrap();
    let Request::ExecWith(e) = r else {
        panic!("exec expected")
    };
    assert_eq!(
        (e.call.tool.as_str(), e.call.args["path"].as_str()),
        ("read_file", Some("/x"))
    );
    assert_eq!(e.options, CallOptions::default());
    let with = Request::ExecWith(ExecWith {
        call: ExecRequest {
            tool: "t".into(),
            args: Map::new(),
        },
        options: CallOptions {
            session: Some("s1".into()),
            task: None,
            label: Some("reviewer".into()),
            no_wait: true,
            cwd: Some("/srv/w".into()),
            stdin: CallerStdin::None,
            context: super::context::AgentContext {
                message: Some("tidy the notes".into()),
                history: vec![super::context::Turn {
                    role: "user".into(),
                    content: "the notes are a mess".into(),
                }],
            },
        },
    });
    let f = frame(&with);
    assert_eq!(parse_request(&f[..f.len() - 1]), Ok(with));
    let plain = frame(&Request::Exec(ExecRequest {
        tool: "t".into(),
        args: Map::new(),
    }));
    assert!(matches!(
        parse_request(&plain[..plain.len() - 1]),
        Ok(Request::ExecWith(_))
    ));
    assert!(matches!(
        parse_request(br#"{"v":1,"type":"check","tool":"t"}"#),
        Ok(Request::Check(_))
    ));
    assert!(matches!(
        parse_request(br#"{"v":1,"type":"status"}"#),
        Ok(Request::Status(_))
    ));
    assert!(matches!(
        parse_request(br#"{"v":1,"type":"subscribe","tool":"x*"}"#),
        Ok(Request::Subscribe(_))
    ));
    assert_eq!(
        parse_request(br#"{"v":1,"type":"tools","follow":true}"#),
        Ok(Request::Tools(ToolsRequest { follow: true }))
    );
    assert_eq!(
        parse_request(br#"{"v":1,"type":"tools"}"#),
        Ok(Request::Tools(ToolsRequest::default()))
    );
    let e = err(r#"{"v":1,"type":"tools","watch":true}"#);
    assert_eq!(e.field.as_deref(), Some("watch"), "{e}");
}

#[test]
fn errors_name_the_field() {
    assert_eq!(err(r#"{"type":"status"}"#).field.as_deref(), Some("v"));
    assert_eq!(
        err(r#"{"v":2,"type":"status"}"#).field.as_deref(),
        Some("v")
    );
    assert_eq!(err(r#"{"v":1}"#).field.as_deref(), Some("type"));
    assert_eq!(
        err(r#"{"v":1,"type":"launch"}"#).field.as_deref(),
        Some("type")
    );
    let e = err(r#"{"v":1,"type":"exec","tool":"t","argz":{}}"#);
    assert_eq!(e.field.as_deref(), Some("argz"), "{e}");
    let e = err(r#"{"v":1,"type":"exec","args":{}}"#);
    assert_eq!(e.field.as_deref(), Some("tool"), "{e}");
    let e = err(r#"{"v":1,"type":"exec","tool":"t","stdin":"closed"}"#);
    assert_eq!(e.field.as_deref(), Some("stdin"), "{e}");
    let e = err(r#"{"v":1,"type":"exec","tool":"t","stdin":false}"#);
    assert_eq!(e.field.as_deref(), Some("stdin"), "{e}");
    let e = err(r#"{"v":1,"type":"exec","tool":7}"#);
    assert!(e.message.contains("invalid type"), "{e}");
    assert!(err("{nope").message.starts_with("malformed JSON"));
    let e = err(r#"{"v":1,"type":"check","tool":"a","tool":"b"}"#);
    assert_eq!(e.field.as_deref(), Some("tool"), "{e}");
    let e = err(r#"{"v":1,"type":"check","tool":"a","args":{"x":{"y":1,"y":2}}}"#);
    assert!(e.message.contains("duplicate key `y`"), "{e}");
    assert!(
        err(r#"{"v":1,"type":"status"} trailing"#)
            .message
            .starts_with("malformed JSON")
    );
    assert!(err("[1,2]").message.contains("JSON object"));
}

#[test]
fn requests_a_client_frames_parse_back() {
    let request = Request::Subscribe(SubscribeRequest {
        tool: Some("x*".into()),
        call: None,
    });
    let f = frame(&request);
    assert_eq!(parse_request(&f[..f.len() - 1]), Ok(request));
}
