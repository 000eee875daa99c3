//! Writes a frame's typed value as JSON with every object's keys in sorted (byte) order: the
//! order the wire has always had (the renderers used to build `serde_json::Value`s, whose maps
//! are sorted), which the golden streams pin. So a frame is built as the type its schema is
//! derived from (`super::schemas`) and written straight from it: the same fields in the
//! document and on the wire, with no `Value` tree in between.
//!
//! An object's members are written into one scratch buffer as they come, then copied out in
//! key order; the scratch is kept across frames (a thread-local), so a frame allocates only its
//! own text.

use std::cell::RefCell;

use serde::ser::{self, Impossible, Serialize};

/// `value` as one line of JSON, keys sorted.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> String {
    thread_local! {
        static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    let mut out = Vec::with_capacity(128);
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut scratch) => {
            scratch.clear();
            write(value, &mut out, &mut scratch);
        }
        // Re-entered (a `Serialize` impl that renders a frame itself): a scratch of its own.
        Err(_) => write(value, &mut out, &mut Vec::new()),
    });
    String::from_utf8(out).expect("JSON is UTF-8")
}

fn write<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>, scratch: &mut Vec<u8>) {
    value
        .serialize(Sorted { out, scratch })
        .expect("a frame serializes");
}

/// Appends to `out`; objects are staged in `scratch` (above what enclosing objects staged).
struct Sorted<'o> {
    out: &'o mut Vec<u8>,
    scratch: &'o mut Vec<u8>,
}

type Error = serde_json::Error;

fn custom(msg: &str) -> Error {
    <Error as ser::Error>::custom(msg)
}

impl Sorted<'_> {
    fn json<T: Serialize + ?Sized>(self, v: &T) -> Result<(), Error> {
        serde_json::to_writer(&mut *self.out, v)
    }
}

macro_rules! primitive {
    ($($f:ident($t:ty)),* $(,)?) => {$(
        fn $f(self, v: $t) -> Result<(), Error> {
            self.json(&v)
        }
    )*};
}

impl<'o> ser::Serializer for Sorted<'o> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Seq<'o>;
    type SerializeTuple = Seq<'o>;
    type SerializeTupleStruct = Seq<'o>;
    type SerializeTupleVariant = Impossible<(), Error>;
    type SerializeMap = Object<'o>;
    type SerializeStruct = Object<'o>;
    type SerializeStructVariant = Impossible<(), Error>;

    primitive!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_i128(i128),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_u128(u128),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
    );

    fn serialize_none(self) -> Result<(), Error> {
        self.json(&())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), Error> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        self.json(&())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        self.json(&())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, v: &'static str) -> Result<(), Error> {
        self.json(v)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        let mut o = Object::new(self);
        ser::SerializeMap::serialize_entry(&mut o, variant, v)?;
        ser::SerializeMap::end(o)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Seq<'o>, Error> {
        self.out.push(b'[');
        Ok(Seq {
            s: self,
            first: true,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq<'o>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Seq<'o>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        Err(custom("no frame has a tuple variant"))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Object<'o>, Error> {
        Ok(Object::new(self))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Object<'o>, Error> {
        Ok(Object::new(self))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        Err(custom("no frame has an externally tagged struct variant"))
    }
}

struct Seq<'o> {
    s: Sorted<'o>,
    first: bool,
}

impl Seq<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        if !std::mem::take(&mut self.first) {
            self.s.out.push(b',');
        }
        v.serialize(Sorted {
            out: self.s.out,
            scratch: self.s.scratch,
        })
    }
    fn close(self) -> Result<(), Error> {
        self.s.out.push(b']');
        Ok(())
    }
}

impl ser::SerializeSeq for Seq<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        self.element(v)
    }
    fn end(self) -> Result<(), Error> {
        self.close()
    }
}

impl ser::SerializeTuple for Seq<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        self.element(v)
    }
    fn end(self) -> Result<(), Error> {
        self.close()
    }
}

impl ser::SerializeTupleStruct for Seq<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        self.element(v)
    }
    fn end(self) -> Result<(), Error> {
        self.close()
    }
}

/// One object being staged: each member is `"key":value` in the scratch from `base` on, where
/// it lies and where its key's text lies (for sorting) are in `members`.
struct Object<'o> {
    s: Sorted<'o>,
    base: usize,
    members: Vec<Member>,
    /// A map's key written (as JSON) but not yet its value.
    key: Option<usize>,
}

struct Member {
    /// The key's text, unescaped.
    key: (usize, usize),
    start: usize,
    end: usize,
}

impl<'o> Object<'o> {
    fn new(s: Sorted<'o>) -> Self {
        let base = s.scratch.len();
        Object {
            s,
            base,
            members: Vec::new(),
            key: None,
        }
    }

    /// Writes a key as JSON; `Err` when it is not a string.
    fn key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<usize, Error> {
        let start = self.s.scratch.len();
        serde_json::to_writer(&mut *self.s.scratch, k)?;
        if self.s.scratch.get(start) != Some(&b'"') {
            return Err(custom("an object key is a string"));
        }
        Ok(start)
    }

    /// The value of the member whose key begins at `start`.
    fn value<T: Serialize + ?Sized>(&mut self, start: usize, v: &T) -> Result<(), Error> {
        let key_end = self.s.scratch.len();
        self.s.scratch.push(b':');
        // The value is written at the scratch's end; an object inside it stages in `out` (above
        // what is there, and gone again when it closes).
        let mut scratch = std::mem::take(self.s.scratch);
        let result = v.serialize(Sorted {
            out: &mut scratch,
            scratch: self.s.out,
        });
        *self.s.scratch = scratch;
        result?;
        let end = self.s.scratch.len();
        let quoted = (start + 1, key_end - 1);
        let key = if self.s.scratch[quoted.0..quoted.1].contains(&b'\\') {
            // An escaped key: its text goes after the member, for sorting only.
            let text: String = serde_json::from_slice(&self.s.scratch[start..key_end])?;
            self.s.scratch.extend_from_slice(text.as_bytes());
            (end, self.s.scratch.len())
        } else {
            quoted
        };
        self.members.push(Member { key, start, end });
        Ok(())
    }
}

impl ser::SerializeMap for Object<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), Error> {
        self.key = Some(self.key(k)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        let start = self
            .key
            .take()
            .ok_or_else(|| custom("a value without key"))?;
        self.value(start, v)
    }
    fn end(self) -> Result<(), Error> {
        close(self)
    }
}

impl ser::SerializeStruct for Object<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        let start = self.key(key)?;
        self.value(start, v)
    }
    fn end(self) -> Result<(), Error> {
        close(self)
    }
}

fn close(mut o: Object<'_>) -> Result<(), Error> {
    let Sorted { out, scratch } = o.s;
    let text = |m: &Member| &scratch[m.key.0..m.key.1];
    o.members.sort_by(|a, b| text(a).cmp(text(b)));
    out.push(b'{');
    for (i, m) in o.members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&scratch[m.start..m.end]);
    }
    out.push(b'}');
    scratch.truncate(o.base);
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde::Serialize;
    use serde_json::json;

    /// What the renderers wrote before: a `Value`, whose maps are sorted.
    fn as_value<T: Serialize>(v: &T) -> String {
        serde_json::to_value(v).unwrap().to_string()
    }

    #[derive(Serialize)]
    #[serde(tag = "type", rename_all = "camelCase")]
    enum Tagged<'a> {
        #[serde(rename_all = "camelCase")]
        ContentDelta {
            item_id: &'a str,
            content_index: u32,
            delta: Inner<'a>,
        },
        Empty {},
    }

    #[derive(Serialize)]
    struct Inner<'a> {
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        z: Option<u8>,
        a: Vec<serde_json::Value>,
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Envelope<'a> {
        stream: &'static str,
        #[serde(flatten)]
        body: Tagged<'a>,
        request_id: &'a str,
        sequence_number: u64,
        ts: i64,
    }

    #[test]
    fn keys_come_out_sorted_as_a_value_has_them() {
        let deep = json!({"b": [{"y": 1, "x": {"d": null, "c": "\u{1}\"\\é"}}], "a\"q": 1, "a#": 2, "A": 3});
        let v = Envelope {
            stream: "request",
            body: Tagged::ContentDelta {
                item_id: "item_message_3",
                content_index: 0,
                delta: Inner {
                    text: "On \"it\"\n",
                    z: None,
                    a: vec![deep.clone(), json!([]), json!({}), json!(1.5), json!(true)],
                },
            },
            request_id: "req1",
            sequence_number: 7,
            ts: -1,
        };
        assert_eq!(super::to_string(&v), as_value(&v));
        let e = Envelope {
            stream: "request",
            body: Tagged::Empty {},
            request_id: "r",
            sequence_number: 1,
            ts: 2,
        };
        assert_eq!(super::to_string(&e), as_value(&e));
        assert_eq!(super::to_string(&deep), deep.to_string());
        assert_eq!(super::to_string(&json!([])), "[]");
        assert_eq!(super::to_string(&json!({})), "{}");
        assert_eq!(
            super::to_string(&Inner {
                text: "t",
                z: Some(1),
                a: Vec::new()
            }),
            r#"{"a":[],"text":"t","z":1}"#
        );
    }
}
