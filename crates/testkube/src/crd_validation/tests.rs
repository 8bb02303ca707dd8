use serde_json::json;

use super::*;

#[test]
fn go_float_matches_go_percent_v() {
    assert_eq!(go_float(0.0), "0");
    assert_eq!(go_float(100.0), "100");
    assert_eq!(go_float(1.5), "1.5");
    assert_eq!(go_float(123456.0), "123456");
    assert_eq!(go_float(1_000_000.0), "1e+06");
    assert_eq!(go_float(1_234_567.0), "1.234567e+06");
    assert_eq!(go_float(0.0001), "0.0001");
    assert_eq!(go_float(0.00001), "1e-05");
}

#[test]
fn go_values_print_as_field_errors_do() {
    assert_eq!(go_value(&json!("x")), "\"x\"");
    assert_eq!(go_value(&json!(-1)), "-1");
    assert_eq!(go_value(&json!(null)), "\"null\"");
    assert_eq!(
        go_value(&json!({"type": "Ready"})),
        "map[string]interface {}{\"type\":\"Ready\"}"
    );
}
