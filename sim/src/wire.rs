//! Light reading of JSON-RPC frames: only the keys a reader needs, straight
//! from the text, without building a `serde_json::Value` (the workspace's
//! `preserve_order` makes every object of one an `IndexMap` keyed through
//! SipHash, and the world reads every frame).
//!
//! A key read here means what it means read from a `Value`: an object's
//! key given twice keeps its last value, anything but an object has none of
//! the keys, and a key of the wrong type is an error the caller answers by
//! reading the text as a `Value` after all (see [`Sent::parse`]), so odd
//! frames are judged exactly as before. Skipped values are checked for
//! syntax only: the texts read here are all serde_json's own output (the
//! clients' frames and the host's), which never holds the lone surrogate
//! escapes or the nesting past 128 levels that a `Value` would refuse.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;

/// Declares a struct read from a JSON object for the keys named (see the
/// module docs); its fields must be `Default`.
macro_rules! keys {
    ($(#[$doc:meta])* struct $name:ident { $($key:literal => $field:ident: $ty:ty,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Default)]
        pub(crate) struct $name<'a> {
            $(pub(crate) $field: $ty,)*
            text: std::marker::PhantomData<&'a str>,
        }

        impl<'de> Deserialize<'de> for $name<'de> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Keys;
                impl<'de> Visitor<'de> for Keys {
                    type Value = $name<'de>;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a JSON object")
                    }
                    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<$name<'de>, A::Error> {
                        let mut out = $name::default();
                        while let Some(key) = map.next_key::<Text<'de>>()? {
                            match &*key.0 {
                                $($key => out.$field = map.next_value()?,)*
                                _ => {
                                    map.next_value::<IgnoredAny>()?;
                                }
                            }
                        }
                        Ok(out)
                    }
                }
                d.deserialize_map(Keys)
            }
        }
    };
}

/// A JSON string, borrowed from the text unless it holds escapes.
#[derive(Debug)]
pub(crate) struct Text<'a>(pub(crate) Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A key that is there, whatever its value, `null` included (a plain
/// `Option<&RawValue>` would read `null` as absent): its raw text.
#[derive(Debug, Default)]
pub(crate) struct Present<'a>(pub(crate) Option<&'a RawValue>);

impl<'de> Deserialize<'de> for Present<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&RawValue>::deserialize(d).map(|raw| Present(Some(raw)))
    }
}

keys! {
    /// The keys of a client frame that [`Sent`] reads.
    struct SentKeys {
        "id" => id: Option<u64>,
        "method" => method: Option<Text<'a>>,
        "params" => params: Option<SentParams<'a>>,
    }
}

keys! {
    /// A client frame's `params`, as far as [`Sent`] reads them.
    struct SentParams {
        "channel" => channel: Option<Text<'a>>,
        "action" => action: Option<SentAction<'a>>,
        "clientSeq" => client_seq: Option<i64>,
        "config" => config: Option<SentConfig<'a>>,
    }
}

keys! {
    /// A dispatched action, for its type.
    struct SentAction {
        "type" => kind: Option<Text<'a>>,
    }
}

keys! {
    /// `createSession`'s config, for its scope.
    struct SentConfig {
        "scope" => scope: Option<Text<'a>>,
    }
}

/// What a frame a client sends says, read once when it is sent: its trace
/// label, the grants rules (`checkers::grants::Frame`) and the residency
/// rules all read these few keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sent {
    /// `id`, when an unsigned integer.
    pub id: Option<u64>,
    /// `method`, when a string.
    pub method: Option<String>,
    /// `params.channel`, when a string.
    pub channel: Option<String>,
    /// `params.action.type`, when a string.
    pub action: Option<String>,
    /// `params.clientSeq`, when an integer that fits an `i64`.
    pub client_seq: Option<i64>,
    /// `params.config.scope`, when a string.
    pub scope: Option<String>,
}

impl Sent {
    /// Reads a frame's text; nothing of it when it is not JSON.
    pub fn parse(text: &str) -> Sent {
        match serde_json::from_str::<SentKeys<'_>>(text) {
            Ok(keys) => {
                let params = keys.params.unwrap_or_default();
                Sent {
                    id: keys.id,
                    method: keys.method.map(|t| t.0.into_owned()),
                    channel: params.channel.map(|t| t.0.into_owned()),
                    action: params.action.and_then(|a| a.kind).map(|t| t.0.into_owned()),
                    client_seq: params.client_seq,
                    scope: params.config.and_then(|c| c.scope).map(|t| t.0.into_owned()),
                }
            }
            // Not JSON, or a key of another type than read above: read it
            // as a `Value`, as the world always did.
            Err(_) => Sent::of_value(&serde_json::from_str(text).unwrap_or_default()),
        }
    }

    /// The same keys read from a `Value`.
    fn of_value(v: &Value) -> Sent {
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_owned);
        Sent {
            id: v.get("id").and_then(Value::as_u64),
            method: s("/method"),
            channel: s("/params/channel"),
            action: s("/params/action/type"),
            client_seq: v.pointer("/params/clientSeq").and_then(Value::as_i64),
            scope: s("/params/config/scope"),
        }
    }

    /// The trace label of client `client`'s frame: `frame c<N> <what>
    /// <channel>`, `what` the action's type for a `dispatchAction`, else the
    /// method (`?` when missing), the channel `-` when there is none.
    pub fn label(&self, client: usize) -> String {
        let method = self.method.as_deref().unwrap_or("?");
        let channel = self.channel.as_deref().unwrap_or("-");
        let what = if method == "dispatchAction" { self.action.as_deref().unwrap_or("?") } else { method };
        format!("frame c{client} {what} {channel}")
    }
}

keys! {
    /// The keys of a host frame that [`HostFrame`] reads.
    struct HostKeys {
        "jsonrpc" => jsonrpc: Option<Text<'a>>,
        "method" => method: Option<Text<'a>>,
        "id" => id: Option<u64>,
        "params" => params: Present<'a>,
        "result" => result: Present<'a>,
        "error" => error: Present<'a>,
    }
}

/// A frame from the host as a client first reads it: the JSON-RPC keys,
/// with `params`, `result` and `error` left as their raw JSON text, to be
/// decoded straight into ahp-types (or read as a `Value` where one is
/// wanted).
#[derive(Debug)]
pub(crate) struct HostFrame<'a> {
    /// `jsonrpc` is the string `2.0`.
    pub(crate) jsonrpc_ok: bool,
    /// `method`, when a string.
    pub(crate) method: Option<Cow<'a, str>>,
    /// `id`, when an unsigned integer.
    pub(crate) id: Option<u64>,
    /// `params`, when there (`null` included).
    pub(crate) params: Option<Cow<'a, str>>,
    /// `result`, when there (`null` included).
    pub(crate) result: Option<Cow<'a, str>>,
    /// `error`, when there (`null` included).
    pub(crate) error: Option<Cow<'a, str>>,
}

impl<'a> HostFrame<'a> {
    /// Reads a frame's text; the error is serde_json's for a text that is
    /// not JSON.
    pub(crate) fn parse(text: &'a str) -> Result<HostFrame<'a>, serde_json::Error> {
        let raw = |p: Present<'a>| p.0.map(|r| Cow::Borrowed(r.get()));
        match serde_json::from_str::<HostKeys<'a>>(text) {
            Ok(keys) => Ok(HostFrame {
                jsonrpc_ok: keys.jsonrpc.is_some_and(|j| j.0 == "2.0"),
                method: keys.method.map(|t| t.0),
                id: keys.id,
                params: raw(keys.params),
                result: raw(keys.result),
                error: raw(keys.error),
            }),
            // Not JSON, or a key of another type than read above: read it
            // as a `Value`, as the clients always did.
            Err(_) => Ok(HostFrame::of_value(&serde_json::from_str(text)?)),
        }
    }

    /// The same keys read from a `Value`.
    fn of_value(v: &Value) -> HostFrame<'static> {
        let raw = |key: &str| v.get(key).map(|p| Cow::Owned(p.to_string()));
        HostFrame {
            jsonrpc_ok: v.get("jsonrpc").and_then(Value::as_str) == Some("2.0"),
            method: v.get("method").and_then(Value::as_str).map(|m| Cow::Owned(m.to_owned())),
            id: v.get("id").and_then(Value::as_u64),
            params: raw("params"),
            result: raw("result"),
            error: raw("error"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The light reading and the `Value` reading agree on every frame.
    #[test]
    fn sent_reads_as_a_value_does() {
        let frames = [
            r#"{"jsonrpc":"2.0","id":3,"method":"createSession","params":{"channel":"ahp-session:/s1","config":{"scope":"team","x":[1,{"y":2}]}}}"#,
            r#"{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"ahp-chat:/ahp-session@s1","clientSeq":4,"action":{"type":"chat/turnStarted","message":{"text":"a\nb \"q\" \u00e9"}}}}"#,
            r#"{"method":"m\u0065thod","method":"second","params":{"channel":"a"},"params":{"channel":"b","clientSeq":-9}}"#,
            r#"{"id":-1,"method":"x"}"#,
            r#"{"id":1.0,"method":"x"}"#,
            r#"{"id":18446744073709551615,"method":"x","params":{"clientSeq":9223372036854775808}}"#,
            r#"{"id":null,"method":null,"params":null}"#,
            r#"{"method":"x","params":[{"channel":"a"}]}"#,
            r#"{"method":"x","params":{"action":null,"config":"scope"}}"#,
            r#"{"method":7,"params":{"channel":3}}"#,
            r#"["2.0",1,"x",{"channel":"a"}]"#,
            r#"{"id":1,"id":"two","method":"x"}"#,
            r#"{"id":"two","id":2,"method":"x"}"#,
            r#"{"\u0069d":5,"method":"x","params":{"action":{"type":"t","type":"u"}}}"#,
            "not json",
            "",
            "null",
            r#"{"method":"x""#,
        ];
        // The well-formed ones take the light path (anything else is read
        // as a `Value` anyway).
        for text in [frames[0], frames[1], frames[2], frames[6], frames[13]] {
            assert!(serde_json::from_str::<SentKeys<'_>>(text).is_ok(), "{text}");
        }
        for text in [frames[3], frames[4], frames[7], frames[8], frames[10], frames[11]] {
            assert!(serde_json::from_str::<SentKeys<'_>>(text).is_err(), "{text}");
        }
        for text in frames {
            let value: Value = serde_json::from_str(text).unwrap_or_default();
            assert_eq!(Sent::parse(text), Sent::of_value(&value), "{text}");
        }
    }

    /// The light reading and the `Value` reading agree on every frame (the
    /// payloads as JSON: the light one keeps the text as it was written).
    #[test]
    fn host_frames_read_as_values_do() {
        let frames = [
            r#"{"jsonrpc":"2.0","id":4,"result":null}"#,
            r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32009,"message":"no \"way\""}}"#,
            r#"{ "jsonrpc" : "2.0" , "method" : "action" , "params" : { "channel" : "c", "x": [1, 2.5, -3, {"y": null}] } }"#,
            r#"{"jsonrpc":"2.0","method":"root/session\u0041dded"}"#,
            r#"{"jsonrpc":"2.0","result":1,"result":{"a":1},"id":2,"error":null}"#,
            r#"{"jsonrpc":"2.0","params":null,"method":null,"id":null}"#,
            r#"{"jsonrpc":"1.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":2,"id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":-4,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":4.5,"result":{}}"#,
            r#"{"jsonrpc":"2.0","method":["action"],"params":{}}"#,
            r#"["2.0",1,{}]"#,
            "17",
        ];
        let json = |raw: &Option<Cow<'_, str>>| raw.as_deref().map(|t| serde_json::from_str::<Value>(t).expect("JSON"));
        for text in frames {
            let light = HostFrame::parse(text).expect("JSON");
            let value = HostFrame::of_value(&serde_json::from_str(text).expect("JSON"));
            assert_eq!((light.jsonrpc_ok, &light.method, light.id), (value.jsonrpc_ok, &value.method, value.id), "{text}");
            assert_eq!((json(&light.params), json(&light.result), json(&light.error)), (json(&value.params), json(&value.result), json(&value.error)), "{text}");
        }
        for text in [frames[0], frames[2], frames[3], frames[4], frames[5]] {
            assert!(serde_json::from_str::<HostKeys<'_>>(text).is_ok(), "{text}");
        }
        assert_eq!(HostFrame::parse(frames[0]).expect("JSON").result.as_deref(), Some("null"));
        let bad = "{\"jsonrpc\":";
        assert_eq!(HostFrame::parse(bad).map(|_| ()).map_err(|e| e.to_string()), serde_json::from_str::<Value>(bad).map(|_| ()).map_err(|e| e.to_string()));
    }

    #[test]
    fn labels() {
        let label = |text: &str| Sent::parse(text).label(2);
        assert_eq!(label(r#"{"method":"subscribe","params":{"channel":"ahp-root://"}}"#), "frame c2 subscribe ahp-root://");
        assert_eq!(label(r#"{"method":"dispatchAction","params":{"channel":"c","action":{"type":"t"}}}"#), "frame c2 t c");
        assert_eq!(label(r#"{"method":"dispatchAction","params":{"channel":"c"}}"#), "frame c2 ? c");
        assert_eq!(label("nope"), "frame c2 ? -");
    }
}
