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

fn rule_errors(rule: &str, schema: serde_json::Value, value: serde_json::Value) -> Vec<String> {
    let mut schema = schema;
    schema["x-kubernetes-validations"] = json!([{"rule": rule}]);
    let root = json!({"type": "object", "properties": {"x": schema}});
    cel_rules::validate(&root, &json!({"x": value}), None)
        .into_iter()
        .map(|e| format!("{}: {}", e.field, e.message))
        .collect()
}

#[test]
fn kubernetes_string_extensions_evaluate() {
    let s = json!({"type": "string"});
    for rule in [
        "self.lowerAscii() == 'abc-déf'",
        "self.upperAscii() == 'ABC-DéF'",
        "self.split('-') == ['aBc', 'Déf']",
        "self.split('-', 1) == ['aBc-Déf']",
        "self.substring(4) == 'Déf' && self.substring(0, 3) == 'aBc'",
        "self.indexOf('D') == 4 && self.lastIndexOf('c') == 2 && self.indexOf('z') == -1",
        "self.charAt(5) == 'é'",
        "self.replace('-', '+') == 'aBc+Déf'",
        "self.size() == 7",
        "self.find('[A-Z]') == 'B' && self.findAll('[a-z]') == ['a', 'c', 'f']",
        "['a', 'b'].join('/') == 'a/b' && ['x', 'y'].indexOf('y') == 1",
        "'  t  '.trim() == 't' && self.matches('^a.c')",
    ] {
        assert_eq!(
            rule_errors(rule, s.clone(), json!("aBc-Déf")),
            Vec::<String>::new(),
            "{rule}"
        );
    }
}

#[test]
fn failed_and_broken_rules_are_reported_on_the_node() {
    let s = json!({"type": "string"});
    assert_eq!(
        rule_errors("self == 'a'", s.clone(), json!("b")),
        vec!["x: Invalid value: \"b\": failed rule: self == 'a'"]
    );
    assert_eq!(
        rule_errors("self.nope == 1", json!({"type": "object"}), json!({})),
        vec!["x: Invalid value: \"object\": no such key: nope evaluating rule: self.nope == 1"]
    );
    let broken = rule_errors("self ==", s.clone(), json!("b"));
    assert_eq!(broken.len(), 1);
    assert!(
        broken[0].starts_with("x: Invalid value: \"string\": rule compile error: "),
        "{broken:?}"
    );
    // Transition rules wait for an old value.
    assert_eq!(
        rule_errors("self == oldSelf", s, json!("b")),
        Vec::<String>::new()
    );
}

#[test]
fn property_names_are_escaped_for_cel() {
    let schema = json!({"type": "object", "properties": {
        "a-b": {"type": "integer"}, "x.y/z": {"type": "string"}, "if": {"type": "boolean"}, "__p": {"type": "string"}}});
    let rule = "self.a__dash__b == 1 && self.x__dot__y__slash__z == 's' && self.__if__ && self.__underscores__p == 'u'";
    let value = json!({"a-b": 1, "x.y/z": "s", "if": true, "__p": "u"});
    assert_eq!(rule_errors(rule, schema, value), Vec::<String>::new());
}

#[test]
fn pruning_keeps_type_meta_and_preserved_fields() {
    let schema = json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string", "default": "d"}}}},
            "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {}}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}});
    let mut obj = json!({"apiVersion": "v", "kind": "K", "metadata": {"name": "n", "x": 1}, "top": 1,
        "spec": {"list": [{"b": 1}], "map": {"k": {"c": 1}}, "free": {"d": {"e": 1}}}});
    let pruned = prune_and_default(&schema, &mut obj);
    assert_eq!(pruned, vec!["spec.list[0].b", "spec.map.k.c", "top"]);
    assert_eq!(
        obj,
        json!({"apiVersion": "v", "kind": "K", "metadata": {"name": "n", "x": 1},
        "spec": {"list": [{"a": "d"}], "map": {"k": {}}, "free": {"d": {"e": 1}}}})
    );
}

#[test]
fn list_map_keys_and_set_items_must_be_unique() {
    let schema = json!({"type": "object", "properties": {
        "conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
            "items": {"type": "object", "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}},
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}}});
    let obj = json!({"conditions": [{"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}],
        "tags": ["a", "b", "a"]});
    let got: Vec<String> = errors(&schema, &obj, None, &[])
        .into_iter()
        .map(|e| format!("{}: {}: {}", e.field, e.reason, e.message))
        .collect();
    assert_eq!(
        got,
        vec![
            "conditions[1]: FieldValueDuplicate: Duplicate value: map[string]interface {}{\"type\":\"Ready\"}",
            "tags[2]: FieldValueDuplicate: Duplicate value: \"a\"",
        ]
    );
}

#[test]
fn optional_old_self_runs_on_create_and_field_path_names_a_map_key() {
    let rule = json!({"rule": "oldSelf.hasValue() ? self == oldSelf.value() : self == 'init'",
        "optionalOldSelf": true, "message": "m"});
    let root = json!({"type": "object", "properties": {"x": {"type": "string", "x-kubernetes-validations": [rule]}}});
    let fields = |new: serde_json::Value, old: Option<serde_json::Value>| -> Vec<String> {
        cel_rules::validate(&root, &new, old.as_ref())
            .into_iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    };
    assert_eq!(fields(json!({"x": "init"}), None), Vec::<String>::new());
    assert_eq!(
        fields(json!({"x": "other"}), None),
        vec!["x: Invalid value: \"other\": m"]
    );
    assert_eq!(
        fields(json!({"x": "b"}), Some(json!({"x": "a"}))),
        vec!["x: Invalid value: \"b\": m"]
    );

    let rule = json!({"rule": "!('a.b' in self) || self['a.b'] == 'ok'", "fieldPath": "['a.b']", "message": "bad a.b"});
    let root = json!({"type": "object", "properties": {"m": {"type": "object",
        "additionalProperties": {"type": "string"}, "x-kubernetes-validations": [rule]}}});
    let got: Vec<String> = cel_rules::validate(&root, &json!({"m": {"a.b": "no"}}), None)
        .into_iter()
        .map(|e| format!("{}: {}", e.field, e.message))
        .collect();
    assert_eq!(got, vec!["m[a.b]: Invalid value: bad a.b"]);
}

#[test]
fn is_cidr_reads_ranges_as_kubernetes_does() {
    let s = json!({"type": "string"});
    for good in [
        "10.0.0.0/8",
        "10.0.0.1/8",
        "0.0.0.0/0",
        "::/0",
        "2001:db8::/48",
    ] {
        assert_eq!(
            rule_errors("isCIDR(self)", s.clone(), json!(good)),
            Vec::<String>::new(),
            "{good}"
        );
    }
    for bad in [
        "10.0.0.0",
        "10.0.0.0/33",
        "10.0.0.0/08",
        "10.0.0.0/+8",
        "010.0.0.0/8",
        "::ffff:10.0.0.0/104",
        "fe80::1%eth0/64",
        "2001:db8::/129",
        "",
    ] {
        assert_eq!(
            rule_errors("isCIDR(self)", s.clone(), json!(bad)).len(),
            1,
            "{bad}"
        );
    }
}
