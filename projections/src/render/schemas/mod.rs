//! The events each renderer sends, described as types (utoipa `ToSchema`) for the OpenAPI
//! document: each protocol's events are a `oneOf` on `type`, each variant with its required
//! fields, plus the envelope the renderer puts on every event. The blackbox tests check demo
//! runs' streams against the document, so a renderer that sends what these types do not
//! describe fails there.
//!
//! The renderers build these types and write them (keys sorted, [`super::wire`]), so what the
//! document says is what they send.

pub mod agui;
pub mod items;
pub mod smith;

use utoipa::openapi::schema::{AllOfBuilder, ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::{KnownFormat, Ref, RefOr, SchemaFormat};
use utoipa::{PartialSchema, ToSchema};

/// Named OpenAPI schemas: `(name, schema)`.
pub type Schemas = Vec<(String, RefOr<Schema>)>;

/// The schemas of one protocol's events: the event schema named `name` first, then what it
/// refers to.
fn with_envelope<T: ToSchema>(name: &str, description: &str, envelope: ObjectBuilder) -> Schemas {
    let mut out = vec![(
        name.to_string(),
        RefOr::T(
            AllOfBuilder::new()
                .title(Some(name))
                .description(Some(description))
                .item(envelope)
                .item(Ref::from_schema_name(T::name()))
                .into(),
        ),
    )];
    out.push((T::name().into_owned(), T::schema()));
    T::schemas(&mut out);
    out
}

fn string(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .description(Some(description))
}

fn integer(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::Integer))
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .description(Some(description))
}

/// The AG-UI events without `threadId` and `runId`: `MESSAGES_SNAPSHOT` is conversation-wide.
const AGUI_WITHOUT_RUN: &[&str] = &["MESSAGES_SNAPSHOT"];

/// `AgUiEvent`: one `data:` of an AG-UI stream.
pub fn agui_event() -> Schemas {
    // AG-UI's `timestamp` is a JavaScript safe integer.
    const SAFE: f64 = 9_007_199_254_740_991.0;
    let mut schemas = with_envelope::<agui::AgUiEventBody<'_>>(
        "AgUiEvent",
        "One `data:` of an AG-UI stream: an AG-UI 1.0 event (`@ag-ui/core` `EventSchemas`), \
         with the envelope every event of ours carries",
        ObjectBuilder::new()
            .property("threadId", string("The thread (on every event but MESSAGES_SNAPSHOT)"))
            .property(
                "runId",
                string("The run (on every event but MESSAGES_SNAPSHOT; a continuation run keeps the run's id)"),
            )
            .property(
                "timestamp",
                integer("Epoch ms the log stored the event at")
                    .minimum(Some(-SAFE))
                    .maximum(Some(SAFE)),
            )
            .required("timestamp")
            .property(
                "subagentRunId",
                string("On a sub-agent's work: the sub-agent's agent id"),
            ),
    );
    // Every other event names its thread and run (the envelope describes both).
    let body = schemas
        .iter_mut()
        .find(|(name, _)| name == "AgUiEventBody")
        .map(|(_, s)| s);
    let Some(RefOr::T(Schema::OneOf(body))) = body else {
        unreachable!("AgUiEventBody is a oneOf of objects")
    };
    for variant in &mut body.items {
        let RefOr::T(Schema::Object(v)) = variant else {
            unreachable!("every AG-UI event is an object")
        };
        let RefOr::T(Schema::Object(ty)) = &v.properties["type"] else {
            unreachable!("every AG-UI event has a type")
        };
        let ty = ty.enum_values.as_ref().and_then(|e| e[0].as_str());
        if !ty.is_some_and(|t| AGUI_WITHOUT_RUN.contains(&t)) {
            v.required
                .extend(["threadId".to_string(), "runId".to_string()]);
        }
    }
    schemas
}

/// `ItemsEvent`: one `data:` of an items stream.
pub fn items_event() -> Schemas {
    with_envelope::<items::ItemsEventBody<'_>>(
        "ItemsEvent",
        "One `data:` of an items stream (`event:` is its `type`, `id:` is \
         `{requestId}:{sequence_number}`), with the envelope every event carries",
        ObjectBuilder::new()
            .property(
                "stream",
                ObjectBuilder::new()
                    .schema_type(SchemaType::Type(Type::String))
                    .enum_values(Some(["request"])),
            )
            .required("stream")
            .property("requestId", string("The request"))
            .required("requestId")
            .property(
                "sequence_number",
                integer("1, 2, …: the event's place in the request (trace items included)")
                    .minimum(Some(1.0)),
            )
            .required("sequence_number")
            .property("ts", integer("Epoch ms the log stored the event at"))
            .required("ts"),
    )
}

/// `WorkflowBuilderFrame`: one `data:` of the workflow-builder stream.
pub fn workflow_builder_frame() -> Schemas {
    let mut out = vec![(
        smith::WorkflowBuilderFrame::<'_>::name().into_owned(),
        smith::WorkflowBuilderFrame::<'_>::schema(),
    )];
    smith::WorkflowBuilderFrame::<'_>::schemas(&mut out);
    out
}
