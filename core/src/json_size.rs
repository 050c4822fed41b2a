//! How long a value's JSON text is, found without writing it.
//!
//! An envelope is weighed when it is broadcast (the replay buffer is bounded
//! in bytes, `crate::replay`) but encoded later, by the shell, off the
//! core's thread: encoding a 900 KB message on the one thread every client
//! waits on stalled every other client's request for milliseconds (issue 25,
//! "a ping p99 within 3× of its baseline"). Weighing walks the value's
//! fields once and adds up lengths; it never copies a string nor scans one
//! for characters to escape, so a string is counted as its bytes plus its
//! quotes. The weight is therefore exact for text with nothing to escape
//! and short by the escapes otherwise (a `"` or `\` adds one byte, a
//! control character five); floats are counted as Rust writes them, which
//! serde_json (ryu) may write a few digits shorter or longer.

use serde::ser::{self, Serialize};

/// The length of `value`'s JSON text (`serde_json::to_string`) as weighed
/// above, in bytes; 0 for a value serde cannot encode.
pub fn weigh<T: Serialize + ?Sized>(value: &T) -> usize {
    let mut scale = Scale(0, 0);
    match value.serialize(&mut scale) {
        Ok(()) => scale.0,
        Err(Unweighable) => 0,
    }
}

/// The running count, in bytes, and how many strings it counted (a map
/// key that adds none was not a string, and serde_json quotes it).
struct Scale(usize, usize);

/// Never made: weighing cannot fail, but serde's error type must exist.
#[derive(Debug)]
struct Unweighable;

impl std::fmt::Display for Unweighable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("unweighable")
    }
}

impl std::error::Error for Unweighable {}

impl ser::Error for Unweighable {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Unweighable
    }
}

/// Decimal digits of `n`.
fn digits(mut n: u128) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

impl Scale {
    fn add(&mut self, n: usize) {
        self.0 = self.0.saturating_add(n);
    }
    fn signed(&mut self, v: i128) {
        self.add(usize::from(v < 0) + digits(v.unsigned_abs()));
    }
    fn string(&mut self, s: &str) {
        self.quoted(s.len());
    }
    /// A quoted text of `len` bytes.
    fn quoted(&mut self, len: usize) {
        self.add(len + 2);
        self.1 += 1;
    }
    fn float(&mut self, v: f64) {
        // serde_json writes NaN and the infinities as null.
        if v.is_finite() {
            let mut w = Counter(0);
            let _ = std::fmt::Write::write_fmt(&mut w, format_args!("{v:?}"));
            self.add(w.0);
        } else {
            self.add(4);
        }
    }
}

/// Counts the bytes a `Debug` impl writes, keeping none.
struct Counter(usize);

impl std::fmt::Write for Counter {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// A sequence, map or struct being weighed: whether an element came yet
/// (a comma goes before every one but the first).
struct Compound<'a> {
    scale: &'a mut Scale,
    first: bool,
}

impl Compound<'_> {
    fn comma(&mut self) {
        if !std::mem::take(&mut self.first) {
            self.scale.add(1);
        }
    }
    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Unweighable> {
        self.comma();
        self.scale.string(key);
        self.scale.add(1);
        value.serialize(&mut *self.scale)
    }
}

impl<'a> ser::Serializer for &'a mut Scale {
    type Ok = ();
    type Error = Unweighable;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_bool(self, v: bool) -> Result<(), Unweighable> {
        self.add(if v { 4 } else { 5 });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<(), Unweighable> {
        self.signed(i128::from(v));
        Ok(())
    }
    fn serialize_i16(self, v: i16) -> Result<(), Unweighable> {
        self.signed(i128::from(v));
        Ok(())
    }
    fn serialize_i32(self, v: i32) -> Result<(), Unweighable> {
        self.signed(i128::from(v));
        Ok(())
    }
    fn serialize_i64(self, v: i64) -> Result<(), Unweighable> {
        self.signed(i128::from(v));
        Ok(())
    }
    fn serialize_i128(self, v: i128) -> Result<(), Unweighable> {
        self.signed(v);
        Ok(())
    }
    fn serialize_u8(self, v: u8) -> Result<(), Unweighable> {
        self.add(digits(u128::from(v)));
        Ok(())
    }
    fn serialize_u16(self, v: u16) -> Result<(), Unweighable> {
        self.add(digits(u128::from(v)));
        Ok(())
    }
    fn serialize_u32(self, v: u32) -> Result<(), Unweighable> {
        self.add(digits(u128::from(v)));
        Ok(())
    }
    fn serialize_u64(self, v: u64) -> Result<(), Unweighable> {
        self.add(digits(u128::from(v)));
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Result<(), Unweighable> {
        self.add(digits(v));
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), Unweighable> {
        self.float(f64::from(v));
        Ok(())
    }
    fn serialize_f64(self, v: f64) -> Result<(), Unweighable> {
        self.float(v);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), Unweighable> {
        self.quoted(v.len_utf8());
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), Unweighable> {
        self.string(v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Unweighable> {
        // An array of numbers: each up to three digits and a comma.
        self.add(2 + v.iter().map(|b| digits(u128::from(*b)) + 1).sum::<usize>().saturating_sub(1));
        Ok(())
    }
    fn serialize_none(self) -> Result<(), Unweighable> {
        self.add(4);
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Unweighable> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Unweighable> {
        self.add(4);
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Unweighable> {
        self.add(4);
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<(), Unweighable> {
        self.string(variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result<(), Unweighable> {
        // serde_json's `RawValue` comes here too, as its text in a string:
        // counted two quotes long, which the raw text does not have.
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(self, _: &'static str, _: u32, variant: &'static str, value: &T) -> Result<(), Unweighable> {
        // {"variant":value}
        self.string(variant);
        self.add(3);
        value.serialize(self)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a>, Unweighable> {
        self.add(2);
        Ok(Compound { scale: self, first: true })
    }
    fn serialize_tuple(self, len: usize) -> Result<Compound<'a>, Unweighable> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Compound<'a>, Unweighable> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(self, _: &'static str, _: u32, variant: &'static str, _: usize) -> Result<Compound<'a>, Unweighable> {
        // {"variant":[...]}
        self.string(variant);
        self.add(5);
        Ok(Compound { scale: self, first: true })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a>, Unweighable> {
        self.add(2);
        Ok(Compound { scale: self, first: true })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Unweighable> {
        self.serialize_map(None)
    }
    fn serialize_struct_variant(self, _: &'static str, _: u32, variant: &'static str, _: usize) -> Result<Compound<'a>, Unweighable> {
        // {"variant":{...}}
        self.string(variant);
        self.add(5);
        Ok(Compound { scale: self, first: true })
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = Unweighable;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unweighable> {
        self.comma();
        value.serialize(&mut *self.scale)
    }
    fn end(self) -> Result<(), Unweighable> {
        Ok(())
    }
}

/// The tuple shapes weigh as a sequence does.
macro_rules! weigh_as_seq {
    ($($trait:ident :: $method:ident),*) => {$(
        impl ser::$trait for Compound<'_> {
            type Ok = ();
            type Error = Unweighable;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unweighable> {
                ser::SerializeSeq::serialize_element(self, value)
            }
            fn end(self) -> Result<(), Unweighable> {
                Ok(())
            }
        }
    )*};
}

weigh_as_seq!(SerializeTuple::serialize_element, SerializeTupleStruct::serialize_field, SerializeTupleVariant::serialize_field);

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = Unweighable;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Unweighable> {
        self.comma();
        // A key that is not a string (a number) is written quoted.
        let strings = self.scale.1;
        key.serialize(&mut *self.scale)?;
        if self.scale.1 == strings {
            self.scale.add(2);
        }
        self.scale.add(1);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unweighable> {
        value.serialize(&mut *self.scale)
    }
    fn end(self) -> Result<(), Unweighable> {
        Ok(())
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = Unweighable;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Unweighable> {
        self.field(key, value)
    }
    fn end(self) -> Result<(), Unweighable> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = Unweighable;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Unweighable> {
        self.field(key, value)
    }
    fn end(self) -> Result<(), Unweighable> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::actions::{ActionEnvelope, SessionMetaChangedAction, SessionTitleChangedAction, StateAction};

    fn exact<T: Serialize>(value: &T) -> usize {
        serde_json::to_string(value).map(|t| t.len()).unwrap_or(usize::MAX)
    }

    /// With nothing to escape, the weight is the text's length, for every
    /// shape serde_json writes: structs, tagged enums, options skipped,
    /// maps of JSON values, numbers, nulls and nested arrays.
    #[test]
    fn the_weight_of_text_with_nothing_to_escape_is_its_length() {
        let mut meta = serde_json::Map::new();
        meta.insert("ahpd.peers".into(), serde_json::json!({"count": 3, "list": [1, -20, 300, null, true, false, "x"], "ratio": 0.25}));
        meta.insert("empty".into(), serde_json::json!({}));
        let envelopes = [
            ActionEnvelope { channel: "ahp-session:/a".into(), action: StateAction::SessionTitleChanged(SessionTitleChangedAction { title: "a title".into() }), server_seq: 12345, origin: None, rejection_reason: None },
            ActionEnvelope { channel: "ahp-session:/b".into(), action: StateAction::SessionMetaChanged(SessionMetaChangedAction { meta: Some(meta) }), server_seq: 0, origin: None, rejection_reason: Some("why".into()) },
        ];
        for e in &envelopes {
            assert_eq!(weigh(e), exact(e), "{}", serde_json::to_string(e).unwrap_or_default());
        }
        let numbers: std::collections::BTreeMap<u32, Vec<i64>> = [(7, vec![i64::MIN, 0, i64::MAX]), (10, vec![])].into();
        assert_eq!(weigh(&numbers), exact(&numbers), "number keys are quoted");
        assert_eq!(weigh(&serde_json::json!([[], [[]], {"a": {"b": []}}])), exact(&serde_json::json!([[], [[]], {"a": {"b": []}}])));
    }

    /// Escapes are what the weight leaves out: short by one byte per quote
    /// or backslash, never long.
    #[test]
    fn text_with_escapes_weighs_less_by_the_escapes() {
        let title = "say \"hi\" \\ now";
        let e = ActionEnvelope { channel: "ahp-session:/a".into(), action: StateAction::SessionTitleChanged(SessionTitleChangedAction { title: title.into() }), server_seq: 1, origin: None, rejection_reason: None };
        assert_eq!(weigh(&e) + 3, exact(&e));
    }
}
