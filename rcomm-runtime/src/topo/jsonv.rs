//! A small JSON value, reader and writer, with serde's data model on both sides, for the
//! topology file form. rcomm's library does not link `serde_json`: its
//! `impl PartialEq<serde_json::Value> for f32` (and every other primitive) is visible to every
//! crate linked with it and makes ordinary user code such as `assert_eq!(x, 1.5)` with `x`
//! inferred ambiguous — rsmpi's own examples stopped compiling against rcomm for that. This
//! value type compares only with itself.

use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};
use serde::ser::{self, Serialize};
use std::fmt::Write as _;

/// Deepest nesting the reader accepts (the topology model nests 5 levels).
const MAX_DEPTH: usize = 64;

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    U(u64),
    I(i64),
    F(f64),
    Str(String),
    Arr(Vec<Value>),
    Obj(Vec<(String, Value)>),
}

/// A reading or writing error, as text.
#[derive(Debug)]
pub(crate) struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Error {}
impl de::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}
impl ser::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

/// `T` as pretty JSON (two-space indents, as `rcomm-topo --dump` always wrote).
pub(crate) fn to_string_pretty<T: Serialize>(v: &T) -> Result<String, Error> {
    let v = v.serialize(ToValue)?;
    let mut out = String::new();
    write(&v, 0, &mut out);
    Ok(out)
}

/// Reads `T` from JSON text.
pub(crate) fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    p.ws();
    let v = p.value(0)?;
    p.ws();
    if p.i != p.s.len() {
        return Err(p.err("trailing characters"));
    }
    T::deserialize(v)
}

// ---- writing -------------------------------------------------------------------------------

fn write(v: &Value, ind: usize, out: &mut String) {
    let pad = |n: usize, out: &mut String| out.extend(std::iter::repeat_n(' ', n));
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::U(n) => write!(out, "{n}").expect("string"),
        Value::I(n) => write!(out, "{n}").expect("string"),
        Value::F(x) if x.is_finite() => {
            // Debug prints the shortest text that reads back to the same f64, with a `.0` or
            // an exponent, so it stays a float.
            write!(out, "{x:?}").expect("string")
        }
        Value::F(_) => out.push_str("null"),
        Value::Str(s) => string(s, out),
        Value::Arr(a) if a.is_empty() => out.push_str("[]"),
        Value::Arr(a) => {
            out.push_str("[\n");
            for (k, x) in a.iter().enumerate() {
                pad(ind + 2, out);
                write(x, ind + 2, out);
                out.push_str(if k + 1 < a.len() { ",\n" } else { "\n" });
            }
            pad(ind, out);
            out.push(']');
        }
        Value::Obj(o) if o.is_empty() => out.push_str("{}"),
        Value::Obj(o) => {
            out.push_str("{\n");
            for (k, (name, x)) in o.iter().enumerate() {
                pad(ind + 2, out);
                string(name, out);
                out.push_str(": ");
                write(x, ind + 2, out);
                out.push_str(if k + 1 < o.len() { ",\n" } else { "\n" });
            }
            pad(ind, out);
            out.push('}');
        }
    }
}

fn string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32).expect("string"),
            c => out.push(c),
        }
    }
    out.push('"');
}

// ---- reading -------------------------------------------------------------------------------

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> Error {
        Error(format!("{what} at byte {}", self.i))
    }
    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }
    fn eat(&mut self, lit: &str) -> Result<(), Error> {
        if self.s[self.i..].starts_with(lit.as_bytes()) {
            self.i += lit.len();
            Ok(())
        } else {
            Err(self.err("invalid literal"))
        }
    }
    fn value(&mut self, depth: usize) -> Result<Value, Error> {
        if depth > MAX_DEPTH {
            return Err(self.err("nested too deeply"));
        }
        match self.s.get(self.i) {
            None => Err(self.err("unexpected end of input")),
            Some(b'n') => self.eat("null").map(|_| Value::Null),
            Some(b't') => self.eat("true").map(|_| Value::Bool(true)),
            Some(b'f') => self.eat("false").map(|_| Value::Bool(false)),
            Some(b'"') => self.string().map(Value::Str),
            Some(b'[') => {
                self.i += 1;
                let mut a = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Value::Arr(a));
                }
                loop {
                    self.ws();
                    a.push(self.value(depth + 1)?);
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Value::Arr(a));
                        }
                        _ => return Err(self.err("expected ',' or ']'")),
                    }
                }
            }
            Some(b'{') => {
                self.i += 1;
                let mut o = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Value::Obj(o));
                }
                loop {
                    self.ws();
                    if self.s.get(self.i) != Some(&b'"') {
                        return Err(self.err("expected a key"));
                    }
                    let k = self.string()?;
                    self.ws();
                    if self.s.get(self.i) != Some(&b':') {
                        return Err(self.err("expected ':'"));
                    }
                    self.i += 1;
                    self.ws();
                    o.push((k, self.value(depth + 1)?));
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Value::Obj(o));
                        }
                        _ => return Err(self.err("expected ',' or '}'")),
                    }
                }
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("expected a value")),
        }
    }
    fn number(&mut self) -> Result<Value, Error> {
        let start = self.i;
        let mut float = false;
        while let Some(&c) = self.s.get(self.i) {
            match c {
                b'0'..=b'9' | b'-' | b'+' => {}
                b'.' | b'e' | b'E' => float = true,
                _ => break,
            }
            self.i += 1;
        }
        let t = std::str::from_utf8(&self.s[start..self.i]).expect("ASCII");
        let bad = || Error(format!("invalid number {t:?} at byte {start}"));
        if !float {
            if let Ok(n) = t.parse::<u64>() {
                return Ok(Value::U(n));
            }
            if let Ok(n) = t.parse::<i64>() {
                return Ok(Value::I(n));
            }
        }
        // JSON's grammar, not Rust's: no "inf", "nan", leading '+' or bare '.'.
        if t.starts_with('+') || t.ends_with('.') || t.contains(".e") || t.contains(".E") {
            return Err(bad());
        }
        t.parse::<f64>().map(Value::F).map_err(|_| bad())
    }
    fn string(&mut self) -> Result<String, Error> {
        self.i += 1;
        let mut out = String::new();
        loop {
            let start = self.i;
            while self.i < self.s.len()
                && !matches!(self.s[self.i], b'"' | b'\\')
                && self.s[self.i] >= 0x20
            {
                self.i += 1;
            }
            out.push_str(
                std::str::from_utf8(&self.s[start..self.i])
                    .map_err(|_| self.err("invalid UTF-8"))?,
            );
            match self.s.get(self.i) {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.i += 1;
                    let c = *self
                        .s
                        .get(self.i)
                        .ok_or_else(|| self.err("unfinished escape"))?;
                    self.i += 1;
                    match c {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let cp = self.hex4()?;
                            let c = if (0xD800..0xDC00).contains(&cp) {
                                self.eat("\\u")?;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.err("unpaired surrogate"));
                                }
                                char::from_u32(0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00))
                            } else {
                                char::from_u32(cp)
                            };
                            out.push(c.ok_or_else(|| self.err("invalid \\u escape"))?);
                        }
                        _ => return Err(self.err("invalid escape")),
                    }
                }
                None => return Err(self.err("unterminated string")),
                Some(_) => return Err(self.err("control character in string")),
            }
        }
    }
    fn hex4(&mut self) -> Result<u32, Error> {
        let h = self
            .s
            .get(self.i..self.i + 4)
            .ok_or_else(|| self.err("short \\u escape"))?;
        self.i += 4;
        u32::from_str_radix(std::str::from_utf8(h).map_err(|_| self.err("bad hex"))?, 16)
            .map_err(|_| self.err("bad \\u escape"))
    }
}

// ---- serde: a Value from any Serialize -----------------------------------------------------

struct ToValue;

struct SeqB(Vec<Value>, Option<&'static str>);
struct MapB(Vec<(String, Value)>, Option<String>, Option<&'static str>);

impl ser::Serializer for ToValue {
    type Ok = Value;
    type Error = Error;
    type SerializeSeq = SeqB;
    type SerializeTuple = SeqB;
    type SerializeTupleStruct = SeqB;
    type SerializeTupleVariant = SeqB;
    type SerializeMap = MapB;
    type SerializeStruct = MapB;
    type SerializeStructVariant = MapB;

    fn serialize_bool(self, v: bool) -> Result<Value, Error> {
        Ok(Value::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<Value, Error> {
        self.serialize_i64(v.into())
    }
    fn serialize_i16(self, v: i16) -> Result<Value, Error> {
        self.serialize_i64(v.into())
    }
    fn serialize_i32(self, v: i32) -> Result<Value, Error> {
        self.serialize_i64(v.into())
    }
    fn serialize_i64(self, v: i64) -> Result<Value, Error> {
        Ok(if v >= 0 {
            Value::U(v as u64)
        } else {
            Value::I(v)
        })
    }
    fn serialize_u8(self, v: u8) -> Result<Value, Error> {
        Ok(Value::U(v.into()))
    }
    fn serialize_u16(self, v: u16) -> Result<Value, Error> {
        Ok(Value::U(v.into()))
    }
    fn serialize_u32(self, v: u32) -> Result<Value, Error> {
        Ok(Value::U(v.into()))
    }
    fn serialize_u64(self, v: u64) -> Result<Value, Error> {
        Ok(Value::U(v))
    }
    fn serialize_f32(self, v: f32) -> Result<Value, Error> {
        Ok(Value::F(v.into()))
    }
    fn serialize_f64(self, v: f64) -> Result<Value, Error> {
        Ok(Value::F(v))
    }
    fn serialize_char(self, v: char) -> Result<Value, Error> {
        Ok(Value::Str(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<Value, Error> {
        Ok(Value::Str(v.to_owned()))
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<Value, Error> {
        Ok(Value::Arr(v.iter().map(|&b| Value::U(b.into())).collect()))
    }
    fn serialize_none(self) -> Result<Value, Error> {
        Ok(Value::Null)
    }
    fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> Result<Value, Error> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<Value, Error> {
        Ok(Value::Null)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<Value, Error> {
        Ok(Value::Null)
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        v: &'static str,
    ) -> Result<Value, Error> {
        Ok(Value::Str(v.to_owned()))
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<Value, Error> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        var: &'static str,
        v: &T,
    ) -> Result<Value, Error> {
        Ok(Value::Obj(vec![(var.to_owned(), v.serialize(ToValue)?)]))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<SeqB, Error> {
        Ok(SeqB(
            Vec::with_capacity(len.unwrap_or(0).min(1 << 16)),
            None,
        ))
    }
    fn serialize_tuple(self, len: usize) -> Result<SeqB, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<SeqB, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        var: &'static str,
        _: usize,
    ) -> Result<SeqB, Error> {
        Ok(SeqB(Vec::new(), Some(var)))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<MapB, Error> {
        Ok(MapB(Vec::new(), None, None))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<MapB, Error> {
        Ok(MapB(Vec::new(), None, None))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        var: &'static str,
        _: usize,
    ) -> Result<MapB, Error> {
        Ok(MapB(Vec::new(), None, Some(var)))
    }
}

fn wrap(v: Value, var: Option<&'static str>) -> Value {
    match var {
        Some(name) => Value::Obj(vec![(name.to_owned(), v)]),
        None => v,
    }
}

impl ser::SerializeSeq for SeqB {
    type Ok = Value;
    type Error = Error;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), Error> {
        self.0.push(v.serialize(ToValue)?);
        Ok(())
    }
    fn end(self) -> Result<Value, Error> {
        Ok(wrap(Value::Arr(self.0), self.1))
    }
}
impl ser::SerializeTuple for SeqB {
    type Ok = Value;
    type Error = Error;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), Error> {
        ser::SerializeSeq::serialize_element(self, v)
    }
    fn end(self) -> Result<Value, Error> {
        ser::SerializeSeq::end(self)
    }
}
impl ser::SerializeTupleStruct for SeqB {
    type Ok = Value;
    type Error = Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), Error> {
        ser::SerializeSeq::serialize_element(self, v)
    }
    fn end(self) -> Result<Value, Error> {
        ser::SerializeSeq::end(self)
    }
}
impl ser::SerializeTupleVariant for SeqB {
    type Ok = Value;
    type Error = Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), Error> {
        ser::SerializeSeq::serialize_element(self, v)
    }
    fn end(self) -> Result<Value, Error> {
        ser::SerializeSeq::end(self)
    }
}
impl ser::SerializeMap for MapB {
    type Ok = Value;
    type Error = Error;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, k: &T) -> Result<(), Error> {
        match k.serialize(ToValue)? {
            Value::Str(s) => {
                self.1 = Some(s);
                Ok(())
            }
            _ => Err(Error("map keys must be strings".into())),
        }
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), Error> {
        let k = self
            .1
            .take()
            .ok_or_else(|| Error("map value without a key".into()))?;
        self.0.push((k, v.serialize(ToValue)?));
        Ok(())
    }
    fn end(self) -> Result<Value, Error> {
        Ok(wrap(Value::Obj(self.0), self.2))
    }
}
impl ser::SerializeStruct for MapB {
    type Ok = Value;
    type Error = Error;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        k: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        self.0.push((k.to_owned(), v.serialize(ToValue)?));
        Ok(())
    }
    fn end(self) -> Result<Value, Error> {
        Ok(wrap(Value::Obj(self.0), self.2))
    }
}
impl ser::SerializeStructVariant for MapB {
    type Ok = Value;
    type Error = Error;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        k: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        ser::SerializeStruct::serialize_field(self, k, v)
    }
    fn end(self) -> Result<Value, Error> {
        ser::SerializeStruct::end(self)
    }
}

// ---- serde: any Deserialize from a Value ---------------------------------------------------

impl<'de> de::Deserializer<'de> for Value {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        match self {
            Value::Null => v.visit_unit(),
            Value::Bool(b) => v.visit_bool(b),
            Value::U(n) => v.visit_u64(n),
            Value::I(n) => v.visit_i64(n),
            Value::F(x) => v.visit_f64(x),
            Value::Str(s) => v.visit_string(s),
            Value::Arr(a) => v.visit_seq(de::value::SeqDeserializer::new(a.into_iter())),
            Value::Obj(o) => v.visit_map(de::value::MapDeserializer::new(o.into_iter())),
        }
    }
    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        match self {
            Value::Null => v.visit_none(),
            x => v.visit_some(x),
        }
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        v: V,
    ) -> Result<V::Value, Error> {
        v.visit_newtype_struct(self)
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        match self {
            Value::Str(s) => v.visit_enum(s.into_deserializer()),
            Value::Obj(mut o) if o.len() == 1 => {
                let (k, val) = o.pop().expect("one entry");
                v.visit_enum(Variant(k, val))
            }
            _ => Err(Error(
                "expected an enum: a string or an object with one key".into(),
            )),
        }
    }
    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

impl<'de> IntoDeserializer<'de, Error> for Value {
    type Deserializer = Value;
    fn into_deserializer(self) -> Value {
        self
    }
}

struct Variant(String, Value);

impl<'de> de::EnumAccess<'de> for Variant {
    type Error = Error;
    type Variant = Value;
    fn variant_seed<S: de::DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Value), Error> {
        let name = seed.deserialize(self.0.into_deserializer())?;
        Ok((name, self.1))
    }
}

impl<'de> de::VariantAccess<'de> for Value {
    type Error = Error;
    fn unit_variant(self) -> Result<(), Error> {
        match self {
            Value::Null => Ok(()),
            _ => Err(Error("expected a unit variant".into())),
        }
    }
    fn newtype_variant_seed<S: de::DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, Error> {
        seed.deserialize(self)
    }
    fn tuple_variant<V: Visitor<'de>>(self, _: usize, v: V) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_any(self, v)
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        _: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_any(self, v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_json_allows_and_refuses_the_rest() {
        let v: Vec<Option<f64>> = from_str(" [1, -2.5e3, null, 0.125 ] ").unwrap();
        assert_eq!(v, [Some(1.0), Some(-2500.0), None, Some(0.125)]);
        let s: String = from_str(r#""a\"\\\/\n\u00e9\ud83d\ude00""#).unwrap();
        assert_eq!(s, "a\"\\/\né😀");
        let n: u64 = from_str("18446744073709551615").unwrap();
        assert_eq!(n, u64::MAX);
        for bad in [
            "",
            "[1,]",
            "{\"a\" 1}",
            "[1 2]",
            "nul",
            "\"\\x\"",
            "+1",
            "1.",
            "inf",
            "[1]x",
            "\"\u{1}\"",
        ] {
            assert!(from_str::<de::IgnoredAny>(bad).is_err(), "{bad:?} accepted");
        }
        let deep = "[".repeat(MAX_DEPTH + 2) + &"]".repeat(MAX_DEPTH + 2);
        assert!(
            from_str::<de::IgnoredAny>(&deep)
                .unwrap_err()
                .0
                .contains("deeply")
        );
    }

    #[test]
    fn floats_and_integers_round_trip_exactly() {
        for x in [0.1f64, 1e300, -5e-324, 2.5, 1.0 / 3.0] {
            let t = to_string_pretty(&x).unwrap();
            assert_eq!(from_str::<f64>(&t).unwrap(), x, "{t}");
        }
        for x in [8.0f32, 2.5, 0.1, 16.0e9] {
            let t = to_string_pretty(&x).unwrap();
            assert_eq!(from_str::<f32>(&t).unwrap(), x, "{t}");
        }
        let t = to_string_pretty(&(u64::MAX, -7i32, "x")).unwrap();
        assert_eq!(
            from_str::<(u64, i32, String)>(&t).unwrap(),
            (u64::MAX, -7, "x".into())
        );
    }
}
