//! Any bytes as one request frame: parse_request answers Ok or a ProtocolError, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|frame: &[u8]| {
    if let Err(e) = guard::protocol::parse_request(frame) {
        // The error reply must itself be one well-formed frame.
        let reply = guard::protocol::error_frame(&e);
        assert_eq!(reply.last(), Some(&b'\n'));
        assert_eq!(reply.iter().filter(|&&b| b == b'\n').count(), 1);
    }
});
