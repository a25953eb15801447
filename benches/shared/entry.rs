//! The normalized log entry the store benches write: shaped like VK's recorded ones
//! (tests/fixtures/vk-wire/samples/ws_normalized_logs_live.jsonl), varied by `i`.

pub fn entry_json(i: u64) -> String {
    format!(
        r#"{{"type":"NORMALIZED_ENTRY","content":{{"timestamp":null,"entry_type":{{"type":"tool_use","tool_name":"Bash","action_type":{{"action":"command_run","command":"cargo test --package demo -- step {i}","result":{{"exit_status":{{"type":"success","success":true}},"output":"running 12 tests\ntest result: ok. 12 passed; 0 failed"}}}},"status":{{"status":"success"}}}},"content":"cargo test --package demo -- step {i}"}}}}"#
    )
}
