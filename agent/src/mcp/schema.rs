//! An MCP tool's input schema cleaned to what OpenAI's and Anthropic's tool parameters take,
//! and its name made to fit their rules.
//!
//! MCP allows any JSON Schema (2020-12 by default); the providers want, at the root, a plain
//! `{"type": "object", "properties": {...}}` — no `anyOf`/`oneOf`/`allOf` there (Anthropic),
//! an `items` on every array (OpenAI) — and both fare best without references. So: local
//! `$ref`s are inlined (a recursive one becomes an unconstrained schema), `$defs`,
//! `definitions`, `$schema`, `$id`, `$anchor` and `$comment` are dropped, a root combinator
//! of object schemas is merged into one object, and missing `type`/`properties`/`items` are
//! filled in. Keywords are rewritten only where a schema stands (not inside `properties`
//! maps, whose keys are argument names).

use serde_json::{json, Map, Value};

/// The providers' tool name rule (OpenAI and Anthropic alike): `^[a-zA-Z0-9_-]{1,64}$`.
pub const MAX_TOOL_NAME: usize = 64;

/// `server__tool`, with characters outside `[a-zA-Z0-9_-]` replaced by `_` and cut to fit
/// [`MAX_TOOL_NAME`]; `taken` says whether a name is already used (then `_2`, `_3`, … is
/// appended within the limit).
pub fn offered_name(server: &str, tool: &str, taken: &dyn Fn(&str) -> bool) -> String {
    let clean: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let base = format!("{server}__{clean}");
    let fit = |s: &str, room: usize| -> String { s.chars().take(room).collect() };
    let first = fit(&base, MAX_TOOL_NAME);
    if !taken(&first) {
        return first;
    }
    (2..)
        .map(|n| {
            let suffix = format!("_{n}");
            format!("{}{suffix}", fit(&base, MAX_TOOL_NAME - suffix.len()))
        })
        .find(|name| !taken(name))
        .expect("some suffix is free")
}

/// `schema` as both providers take a tool's parameters.
pub fn clean(schema: &Map<String, Value>) -> Value {
    let defs = Defs {
        root: Value::Object(schema.clone()),
    };
    let mut root = defs.inline(&Value::Object(schema.clone()), &mut Vec::new());
    if let Value::Object(o) = &mut root {
        merge_root_combinators(o);
        o.remove("title");
        o.insert("type".into(), json!("object"));
        if !o.get("properties").is_some_and(Value::is_object) {
            o.insert("properties".into(), json!({}));
        }
        if !o.get("required").is_some_and(Value::is_array) {
            o.remove("required");
        }
    } else {
        root = json!({"type": "object", "properties": {}});
    }
    root
}

/// Keywords dropped wherever a schema stands.
const DROPPED: &[&str] = &[
    "$schema",
    "$id",
    "$anchor",
    "$dynamicAnchor",
    "$comment",
    "$defs",
    "definitions",
];
/// Keywords whose value is a map of name → schema.
const SCHEMA_MAPS: &[&str] = &["properties", "patternProperties", "dependentSchemas"];
/// Keywords whose value is a schema.
const SCHEMA_VALUES: &[&str] = &[
    "items",
    "additionalProperties",
    "not",
    "contains",
    "propertyNames",
    "if",
    "then",
    "else",
    "unevaluatedProperties",
    "unevaluatedItems",
    "additionalItems",
];
/// Keywords whose value is a list of schemas.
const SCHEMA_LISTS: &[&str] = &["anyOf", "oneOf", "allOf", "prefixItems"];

/// References resolve against the original root.
struct Defs {
    root: Value,
}

impl Defs {
    /// `schema` with local references inlined; `stack` holds the references being inlined
    /// (a reference to one of them is recursive and becomes `{}`).
    fn inline(&self, schema: &Value, stack: &mut Vec<String>) -> Value {
        let Value::Object(o) = schema else {
            // `true`/`false` schemas and anything odd are left as they are.
            return schema.clone();
        };
        if let Some(Value::String(r)) = o.get("$ref") {
            let target = r
                .strip_prefix('#')
                .filter(|_| !stack.contains(r))
                .and_then(|pointer| self.root.pointer(pointer));
            let mut out = match target {
                Some(t) => {
                    stack.push(r.clone());
                    let v = self.inline(t, stack);
                    stack.pop();
                    v
                }
                // Recursive, remote or dangling: unconstrained.
                None => json!({}),
            };
            // Siblings of `$ref` (a description, say) are kept over the target's.
            if let Value::Object(out) = &mut out {
                for (k, v) in o {
                    if k != "$ref" && !DROPPED.contains(&k.as_str()) {
                        out.insert(k.clone(), self.inline_keyword(k, v, stack));
                    }
                }
            }
            return out;
        }
        let mut out = Map::new();
        for (k, v) in o {
            if DROPPED.contains(&k.as_str()) {
                continue;
            }
            out.insert(k.clone(), self.inline_keyword(k, v, stack));
        }
        if out.get("type") == Some(&json!("array")) && !out.contains_key("items") {
            out.insert("items".into(), json!({}));
        }
        if out.get("type") == Some(&json!("object")) && !out.contains_key("properties") {
            // OpenAI refuses an object schema without `properties` in some positions; an
            // empty map with open additional properties says the same thing.
            out.insert("properties".into(), json!({}));
        }
        Value::Object(out)
    }

    fn inline_keyword(&self, keyword: &str, value: &Value, stack: &mut Vec<String>) -> Value {
        match value {
            Value::Object(map) if SCHEMA_MAPS.contains(&keyword) => Value::Object(
                map.iter()
                    .map(|(name, s)| (name.clone(), self.inline(s, stack)))
                    .collect(),
            ),
            Value::Array(list) if SCHEMA_LISTS.contains(&keyword) || keyword == "items" => {
                Value::Array(list.iter().map(|s| self.inline(s, stack)).collect())
            }
            v if SCHEMA_VALUES.contains(&keyword) => self.inline(v, stack),
            v => v.clone(),
        }
    }
}

/// A root `allOf`/`anyOf`/`oneOf` of object schemas becomes one object: every branch's
/// properties; required are those of `allOf` branches and those every `anyOf`/`oneOf` branch
/// requires. The choice between branches is said in the description instead.
fn merge_root_combinators(root: &mut Map<String, Value>) {
    let mut properties = root
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut required: Vec<Value> = root
        .get("required")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut note = Vec::new();
    for keyword in ["allOf", "anyOf", "oneOf"] {
        let Some(Value::Array(branches)) = root.remove(keyword) else {
            continue;
        };
        let mut in_every: Option<Vec<Value>> = None;
        for b in &branches {
            if let Some(p) = b.get("properties").and_then(Value::as_object) {
                for (k, v) in p {
                    properties.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            let r: Vec<Value> = b
                .get("required")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if keyword == "allOf" {
                required.extend(r);
            } else {
                in_every = Some(match in_every {
                    None => r,
                    Some(prev) => prev.into_iter().filter(|x| r.contains(x)).collect(),
                });
            }
        }
        if keyword != "allOf" {
            required.extend(in_every.unwrap_or_default());
            let alternatives: Vec<String> = branches
                .iter()
                .map(|b| {
                    let r: Vec<&str> = b
                        .get("required")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    format!("[{}]", r.join(", "))
                })
                .collect();
            note.push(format!(
                "{} of these argument sets: {}",
                if keyword == "oneOf" {
                    "Exactly one"
                } else {
                    "At least one"
                },
                alternatives.join(" or ")
            ));
        }
    }
    if !properties.is_empty() || root.contains_key("properties") {
        root.insert("properties".into(), Value::Object(properties));
    }
    let mut seen = Vec::new();
    required.retain(|r| {
        let fresh = !seen.contains(r);
        seen.push(r.clone());
        fresh
    });
    if !required.is_empty() {
        root.insert("required".into(), Value::Array(required));
    }
    if !note.is_empty() {
        let description = root
            .get("description")
            .and_then(Value::as_str)
            .map(|d| format!("{d} "))
            .unwrap_or_default();
        root.insert(
            "description".into(),
            Value::String(format!("{description}{}.", note.join("; "))),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cleaned(v: Value) -> Value {
        let Value::Object(o) = v else { panic!() };
        clean(&o)
    }

    #[test]
    fn an_empty_or_typeless_schema_becomes_an_empty_object_schema() {
        assert_eq!(
            cleaned(json!({})),
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(
            cleaned(
                json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"})
            ),
            json!({"type": "object", "properties": {}})
        );
    }

    #[test]
    fn references_are_inlined_and_recursion_is_cut() {
        let s = cleaned(json!({
            "type": "object",
            "$defs": {
                "Point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
                "Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}
            },
            "properties": {
                "at": {"$ref": "#/$defs/Point", "description": "where"},
                "list": {"$ref": "#/$defs/Node"},
                "tags": {"type": "array"},
                "$ref": {"type": "string", "title": "an argument named $ref"}
            },
            "required": ["at"]
        }));
        assert_eq!(
            s["properties"]["at"],
            json!({"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"], "description": "where"})
        );
        assert_eq!(
            s["properties"]["list"]["properties"]["next"],
            json!({}),
            "{s}"
        );
        assert_eq!(s["properties"]["tags"]["items"], json!({}));
        // An argument's name is not a keyword.
        assert_eq!(s["properties"]["$ref"]["type"], "string");
        assert!(s.get("$defs").is_none());
        assert_eq!(s["required"], json!(["at"]));
    }

    #[test]
    fn root_combinators_are_merged_into_one_object() {
        let s = cleaned(json!({
            "anyOf": [
                {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
                {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
            ]
        }));
        assert_eq!(s["type"], "object");
        assert!(s.get("anyOf").is_none());
        assert_eq!(s["properties"]["id"]["type"], "string");
        assert_eq!(s["properties"]["name"]["type"], "string");
        assert!(s.get("required").is_none(), "{s}");
        assert_eq!(
            s["description"],
            "At least one of these argument sets: [id] or [name]."
        );
        let s = cleaned(json!({
            "allOf": [
                {"properties": {"a": {"type": "string"}}, "required": ["a"]},
                {"properties": {"b": {"type": "string"}}, "required": ["b"]}
            ]
        }));
        assert_eq!(s["required"], json!(["a", "b"]));
    }

    #[test]
    fn names_fit_the_providers_rule_and_never_collide() {
        let none = |_: &str| false;
        assert_eq!(offered_name("fs", "read_file", &none), "fs__read_file");
        assert_eq!(
            offered_name("fs", "files/read.v2", &none),
            "fs__files_read_v2"
        );
        let long = "x".repeat(100);
        let name = offered_name("fs", &long, &none);
        assert_eq!(name.len(), MAX_TOOL_NAME);
        let taken = |n: &str| n == "fs__a_b";
        assert_eq!(offered_name("fs", "a.b", &taken), "fs__a_b_2");
        let full = offered_name("fs", &long, &|n: &str| {
            n.len() == MAX_TOOL_NAME && !n.ends_with("_2")
        });
        assert!(
            full.ends_with("_2") && full.len() == MAX_TOOL_NAME,
            "{full}"
        );
    }
}
