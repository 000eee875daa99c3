//! Tool arguments: each tool parses its arguments into one type with serde, and the JSON schema
//! the model is offered is generated from the same type with schemars, so the two cannot drift.

use std::borrow::Cow;

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use threadstream_domain::event::JsonObject;

use crate::error::ToolFailure;

/// The JSON schema of `T` as the providers take it: a plain object schema (`type`,
/// `properties`, `required`), every subschema inlined (no `$ref` / `$defs`), no `$schema` and
/// no `title`. Draft 7, the dialect both OpenAI and Anthropic document for tool parameters.
pub fn schema<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft07()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>();
    // The root's title is the Rust type's name and its description the type's doc comment:
    // the tool's own description says what the tool does.
    schema.remove("title");
    schema.remove("description");
    schema.to_value()
}

/// `args` as a `T`, or the tool's failure naming the argument that is wrong and why, so the
/// model can correct its call.
pub fn parse<T: DeserializeOwned>(args: &JsonObject) -> Result<T, ToolFailure> {
    serde_path_to_error::deserialize(Value::Object(args.clone())).map_err(|e| {
        let path = e.path().to_string();
        let error = e.into_inner();
        ToolFailure::failed(match path.as_str() {
            "." => format!("invalid arguments: {error}"),
            _ => format!("invalid argument '{path}': {error}"),
        })
    })
}

/// A string argument that must say something: blank is refused, as a missing value would be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonBlank(pub String);

impl NonBlank {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value without surrounding whitespace.
    pub fn trimmed(&self) -> String {
        self.0.trim().to_string()
    }
}

impl<'de> Deserialize<'de> for NonBlank {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        if s.trim().is_empty() {
            return Err(D::Error::custom("must not be empty"));
        }
        Ok(NonBlank(s))
    }
}

impl JsonSchema for NonBlank {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "NonBlank".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        String::json_schema(generator)
    }
}

/// A node position `[x, y]` given as numbers, rounded to the grid's integers.
pub fn grid_position([x, y]: [f64; 2]) -> [i64; 2] {
    [x.round() as i64, y.round() as i64]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fetch::FetchPolicy;
    use crate::tools::ToolRegistry;

    /// Every key of `v`, at any depth.
    fn keys(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                for (k, v) in o {
                    out.push(k.clone());
                    keys(v, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_tool_schema_is_a_plain_object_schema_the_providers_take() {
        let registry = ToolRegistry::builtin().with_fetch_url(Some(FetchPolicy::default()));
        for spec in registry.specs(&registry.names()) {
            let p = &spec.parameters;
            println!("{}: {p}", spec.name);
            assert_eq!(p["type"], "object", "{}", spec.name);
            assert!(p["properties"].is_object(), "{}", spec.name);
            let mut all = Vec::new();
            keys(p, &mut all);
            for banned in ["$ref", "$defs", "definitions", "$schema", "title"] {
                assert!(
                    !all.iter().any(|k| k == banned),
                    "{}: {banned} in {p}",
                    spec.name
                );
            }
        }
    }

    #[test]
    fn required_arguments_are_the_ones_the_tools_need() {
        let registry = ToolRegistry::builtin().with_fetch_url(Some(FetchPolicy::default()));
        let required = |tool: &str| {
            let mut r: Vec<String> = registry.get(tool).unwrap().parameters()["required"]
                .as_array()
                .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
                .unwrap_or_default();
            r.sort();
            r
        };
        assert_eq!(required("plan"), ["tasks"]);
        assert_eq!(required("delegate"), ["instructions", "role", "tools"]);
        assert_eq!(required("ask-user"), Vec::<String>::new());
        assert_eq!(required("fetch-url"), ["url"]);
        assert_eq!(required("list-workflows"), Vec::<String>::new());
        assert_eq!(required("get-workflow"), ["workflowId"]);
        assert_eq!(required("create-workflow"), ["name"]);
        assert_eq!(required("add-node"), ["name", "type", "workflowId"]);
        assert_eq!(required("connect-nodes"), ["from", "to", "workflowId"]);
        assert_eq!(required("update-node"), ["node", "workflowId"]);
        assert_eq!(required("remove-node"), ["node", "workflowId"]);
        assert_eq!(required("validate-workflow"), ["workflowId"]);
        assert_eq!(required("delete-workflow"), ["workflowId"]);
        // Nested objects keep theirs, inlined.
        let create = registry.get("create-workflow").unwrap().parameters();
        assert_eq!(
            create["properties"]["nodes"]["items"]["required"],
            json!(["name", "type"])
        );
        let plan = registry.get("plan").unwrap().parameters();
        assert_eq!(
            plan["properties"]["tasks"]["items"]["properties"]["status"]["enum"],
            json!(["todo", "in_progress", "done", "failed", "cancelled"])
        );
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Example {
        workflow_id: NonBlank,
        nodes: Option<Vec<Inner>>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        name: NonBlank,
    }

    fn error_of(args: Value) -> String {
        let Value::Object(args) = args else { panic!() };
        match parse::<Example>(&args) {
            Err(ToolFailure::Failed(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn argument_errors_name_the_argument_and_the_problem() {
        assert_eq!(
            error_of(json!({})),
            "invalid arguments: missing field `workflowId`"
        );
        assert_eq!(
            error_of(json!({"workflowId": "  "})),
            "invalid argument 'workflowId': must not be empty"
        );
        assert_eq!(
            error_of(json!({"workflowId": 5})),
            "invalid argument 'workflowId': invalid type: integer `5`, expected a string"
        );
        assert_eq!(
            error_of(json!({"workflowId": "wf", "nodes": [{"name": true}]})),
            "invalid argument 'nodes[0].name': invalid type: boolean `true`, expected a string"
        );
        // Null is absent for an optional argument.
        let Value::Object(ok) = json!({"workflowId": "wf", "nodes": null}) else {
            panic!()
        };
        assert!(parse::<Example>(&ok).is_ok());
    }
}
