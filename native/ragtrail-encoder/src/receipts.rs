//! The stage receipt's two costly steps, native: a column's field text and the receipt over a
//! stage's field texts (`ragtrail.contract.receipts.digests`, which stays the reference and the
//! fallback: docs/semconv.md §8 states the rule, tests/test_native_receipts.py pins these to it).
//!
//! Each function handles the common case only and returns `None` ("not mine") wherever the Python
//! rule would take its general path (a subclass, mixed or other element types, an empty array, an
//! int past 64 bits, a lone surrogate, a value past the canonical form's bounds): the caller then
//! computes the same text in Python.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A str's JSON text as Python's `json` writes it with `ensure_ascii=False`: `"` and `\` escaped,
/// `\b \f \n \r \t` by name, other control characters below 0x20 as `\u00xx`; the rest as it is.
fn json_str(out: &mut String, text: &str) {
    out.push('"');
    let bytes = text.as_bytes();
    let mut start = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        if !NEEDS_ESCAPE[byte as usize] {
            continue;
        }
        // a multi-byte UTF-8 sequence holds no byte below 0x80: `at` is a character boundary
        out.push_str(&text[start..at]);
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            _ => {
                out.push_str("\\u00");
                out.push(HEX[(byte >> 4) as usize] as char);
                out.push(HEX[(byte & 0xf) as usize] as char);
            }
        }
        start = at + 1;
    }
    out.push_str(&text[start..]);
    out.push('"');
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The bytes a JSON string escapes: the control characters, `"` and `\`.
static NEEDS_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// `float.__repr__` (finite) or what `json` writes for NaN and the infinities. Ryu's digits are
/// Python's: the shortest string that reads back to the same double, the nearest of them, a tie
/// broken to the even digit (tests/test_native_receipts.py compares millions); only the layout is
/// Python's own here: an exponent when the decimal point position is at most -4 or past 16, with a
/// sign and at least two digits, and ``.0`` after an integral fixed-point value.
fn float_json(out: &mut String, value: f64) {
    if value.is_nan() {
        out.push_str("NaN");
        return;
    }
    if value.is_infinite() {
        out.push_str(if value > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    let mut buffer = ryu::Buffer::new();
    let text = buffer.format_finite(value); // "-1.2345e-7", "0.3", "1e16", "100.0"
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (mantissa, exponent.parse::<i32>().unwrap_or(0)),
        None => (text, 0),
    };
    // the significant digits, and the decimal point's position: the value is 0.<digits> x 10^point
    let mut digits = [0u8; 40];
    let mut count = 0usize;
    let mut point = 0i32;
    let mut seen_point = false;
    for &byte in mantissa.as_bytes() {
        if byte == b'.' {
            seen_point = true;
            continue;
        }
        if count == 0 && byte == b'0' {
            if seen_point {
                point -= 1; // a leading zero after the point
            }
            continue;
        }
        if count < digits.len() {
            digits[count] = byte;
            count += 1;
        }
        if !seen_point {
            point += 1;
        }
    }
    while count > 0 && digits[count - 1] == b'0' {
        count -= 1;
    }
    if count == 0 {
        // zero (ryu writes "0.0" and "-0.0")
        out.push_str(if negative { "-0.0" } else { "0.0" });
        return;
    }
    let digits = &digits[..count];
    let point = point + exponent;
    if negative {
        out.push('-');
    }
    let text = |out: &mut String, part: &[u8]| part.iter().for_each(|&byte| out.push(byte as char));
    if point <= -4 || point > 16 {
        text(out, &digits[..1]);
        if count > 1 {
            out.push('.');
            text(out, &digits[1..]);
        }
        let shown = point - 1;
        out.push('e');
        out.push(if shown < 0 { '-' } else { '+' });
        let shown = shown.unsigned_abs();
        if shown < 10 {
            out.push('0');
        }
        let _ = write!(out, "{}", shown);
    } else if point <= 0 {
        out.push_str("0.");
        for _ in 0..(-point) {
            out.push('0');
        }
        text(out, digits);
    } else if (point as usize) < count {
        text(out, &digits[..point as usize]);
        out.push('.');
        text(out, &digits[point as usize..]);
    } else {
        text(out, digits);
        for _ in 0..(point as usize - count) {
            out.push('0');
        }
        out.push_str(".0");
    }
}

#[derive(PartialEq, Clone, Copy)]
enum Kind {
    Str,
    Int,
    Float,
    Bool,
}

fn kind_of(item: &Bound<'_, PyAny>) -> Option<Kind> {
    if item.is_exact_instance_of::<PyString>() {
        Some(Kind::Str)
    } else if item.is_exact_instance_of::<PyFloat>() {
        Some(Kind::Float)
    } else if item.is_exact_instance_of::<PyBool>() {
        Some(Kind::Bool)
    } else if item.is_exact_instance_of::<PyInt>() {
        Some(Kind::Int)
    } else {
        None
    }
}

/// The JSON text of an array of one exact scalar type: `json.dumps` of it (`None` when it is not
/// one: then the Python rule decides).
fn array_json<'py>(items: impl ExactSizeIterator<Item = Bound<'py, PyAny>>, max_items: usize, max_chars: usize) -> Option<String> {
    let count = items.len();
    if count == 0 || count > max_items {
        return None;
    }
    let mut out = String::with_capacity(16 * count);
    out.push('[');
    let mut kind: Option<Kind> = None;
    let mut chars = 0usize;
    for (index, item) in items.enumerate() {
        let this = kind_of(&item)?;
        match kind {
            None => kind = Some(this),
            Some(seen) if seen != this => return None,
            _ => {}
        }
        if index > 0 {
            out.push(',');
        }
        chars += scalar_json(&mut out, &item, this)?; // UTF-8 bytes: never fewer than the characters Python counts
        if chars > max_chars {
            return None;
        }
    }
    out.push(']');
    Some(out)
}

/// A scalar of `kind` as `json` writes it; returns the UTF-8 bytes of a str's text (0 for the others:
/// what the canonical form's character bound counts). `None` for a lone surrogate or an int past 64 bits.
fn scalar_json(out: &mut String, item: &Bound<'_, PyAny>, kind: Kind) -> Option<usize> {
    match kind {
        Kind::Str => {
            let text = item.downcast::<PyString>().ok()?.to_str().ok()?;
            json_str(out, text);
            return Some(text.len());
        }
        Kind::Float => float_json(out, item.downcast::<PyFloat>().ok()?.value()),
        Kind::Bool => out.push_str(if item.is_truthy().ok()? { "true" } else { "false" }),
        Kind::Int => {
            let number: i64 = item.extract().ok()?;
            let _ = write!(out, "{}", number);
        }
    }
    Some(0)
}

/// `digests.field_json(value)` for a list or tuple of one exact scalar type (a schema 3 column,
/// findings, ids): the JSON text of the array's JSON text. `None` for anything else.
#[pyfunction]
pub fn field_json(value: &Bound<'_, PyAny>, max_items: usize, max_chars: usize) -> Option<String> {
    let array = if let Ok(tuple) = value.downcast_exact::<PyTuple>() {
        array_json(tuple.iter(), max_items, max_chars)?
    } else if let Ok(list) = value.downcast_exact::<PyList>() {
        array_json(list.iter(), max_items, max_chars)?
    } else {
        return None;
    };
    let mut out = String::with_capacity(array.len() + array.len() / 4 + 2);
    json_str(&mut out, &array);
    Some(out)
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(2 * bytes.len());
    for &byte in bytes {
        out.push(HEX[(byte >> 4) as usize] as char);
        out.push(HEX[(byte & 0xf) as usize] as char);
    }
    out
}

/// The unkeyed stage receipt over field texts (sorted by name: a BTreeMap's order, which is UTF-8 byte
/// order, which is code point order): `(receipt, fields)`, or `None` past the canonical form's bounds.
fn receipt_over(fields: &BTreeMap<String, String>, max_items: usize, max_chars: usize, field_hex: usize) -> Option<(String, String)> {
    if 3 * fields.len() > max_items {
        return None;
    }
    let chars: usize = fields.iter().map(|(name, text)| name.len() + text.len()).sum();
    if chars > max_chars {
        return None; // UTF-8 bytes: never fewer than the characters Python counts
    }
    let mut whole = String::with_capacity(chars + chars / 4 + 8 * fields.len() + 2);
    let mut short = String::with_capacity(fields.len() * (field_hex + 24));
    whole.push('[');
    for (index, (name, text)) in fields.iter().enumerate() {
        if index > 0 {
            whole.push(',');
            short.push(';');
        }
        whole.push('[');
        json_str(&mut whole, name);
        whole.push(',');
        json_str(&mut whole, text);
        whole.push(']');
        short.push_str(name);
        short.push('=');
        short.push_str(&hex(&Sha256::digest(text.as_bytes()))[..field_hex]);
    }
    whole.push(']');
    Some((hex(&Sha256::digest(whole.as_bytes())), short))
}

fn text_fields(fields: &Bound<'_, PyDict>, into: &mut BTreeMap<String, String>) -> Option<()> {
    for (name, text) in fields.iter() {
        let name = name.downcast_exact::<PyString>().ok()?.to_str().ok()?;
        let text = text.downcast_exact::<PyString>().ok()?.to_str().ok()?;
        into.insert(name.to_owned(), text.to_owned());
    }
    Some(())
}

/// `digests.stage_receipt(fields)` unkeyed: `(receipt, fields)` where `receipt` is the sha256 hex of
/// the compact JSON of the `[name, text]` pairs sorted by name and `fields` is `name=<first
/// field_hex hex digits of sha256(text)>` joined on `;`. `None` (the Python rule decides) when a text
/// holds a lone surrogate or the pairs pass the canonical form's bounds.
#[pyfunction]
pub fn stage_receipt(fields: &Bound<'_, PyDict>, max_items: usize, max_chars: usize, field_hex: usize) -> Option<(String, String)> {
    let mut sorted = BTreeMap::new();
    text_fields(fields, &mut sorted)?;
    receipt_over(&sorted, max_items, max_chars, field_hex)
}

/// One span attribute's field text: `digests.field_json(value)` for the values the SDK holds.
fn value_json(value: &Bound<'_, PyAny>, max_items: usize, max_chars: usize) -> Option<String> {
    let Some(kind) = kind_of(value) else {
        return field_json(value, max_items, max_chars);
    };
    let mut out = String::new();
    scalar_json(&mut out, value, kind)?;
    Some(out)
}

/// `digests.stage_receipt(digests.stage_fields(attributes, events))` unkeyed, the span's part made
/// here: each `prefix` attribute not in `uncovered`, named without the prefix, as its field text; then
/// `event_fields` (the events' columns, made by `digests.event_fields`) over them. `None` wherever the
/// Python rule would take a general path.
#[pyfunction]
pub fn stage_receipt_of(
    attributes: &Bound<'_, PyDict>,
    prefix: &str,
    uncovered: &Bound<'_, PyAny>,
    event_fields: &Bound<'_, PyDict>,
    max_items: usize,
    max_chars: usize,
    field_hex: usize,
) -> Option<(String, String)> {
    let mut fields = BTreeMap::new();
    for (key, value) in attributes.iter() {
        let name = key.downcast_exact::<PyString>().ok()?.to_str().ok()?;
        let Some(field) = name.strip_prefix(prefix) else {
            continue;
        };
        if uncovered.contains(&key).ok()? {
            continue;
        }
        fields.insert(field.to_owned(), value_json(&value, max_items, max_chars)?);
    }
    text_fields(event_fields, &mut fields)?;
    receipt_over(&fields, max_items, max_chars, field_hex)
}

fn plain_str<'py>(part: Bound<'py, PyAny>) -> Option<Bound<'py, PyString>> {
    let text = part.downcast_exact::<PyString>().ok()?.clone();
    let plain = text.to_str().ok()?.bytes().all(|byte| (0x20..0x7f).contains(&byte) && byte != b'"' && byte != b'\\');
    plain.then_some(text)
}

fn strings<'py>(column: &Bound<'py, PyAny>, take: usize) -> Option<Vec<Bound<'py, PyString>>> {
    let parts: Vec<Bound<'py, PyAny>> = if let Ok(list) = column.downcast_exact::<PyList>() {
        list.iter().take(take).collect()
    } else if let Ok(tuple) = column.downcast_exact::<PyTuple>() {
        tuple.iter().take(take).collect()
    } else {
        return None;
    };
    parts.into_iter().map(plain_str).collect()
}

/// `digests.sorted_keys_digest` of the `(name, id, sha256)` items of record groups (`(name, ids,
/// shas)`, the ids zipped with as many shas): the sha256 hex of the compact JSON of the items
/// sorted. Only when every part is a str of printable ASCII without `"` or `\` (then the JSON needs
/// no escape and sorting the tuples is sorting their NUL-joined texts); `None` otherwise, or for no
/// items, or a group with more ids than shas.
#[pyfunction]
pub fn records_digest(groups: &Bound<'_, PyAny>) -> Option<String> {
    let mut held = Vec::new();
    for group in groups.try_iter().ok()? {
        let group = group.ok()?;
        let group = group.downcast::<PyTuple>().ok()?; // Records is a NamedTuple
        if group.len() != 3 {
            return None;
        }
        let name = plain_str(group.get_item(0).ok()?)?;
        let ids_column = group.get_item(1).ok()?;
        let shas_column = group.get_item(2).ok()?;
        let count = ids_column.len().ok()?;
        if count > shas_column.len().ok()? {
            return None;
        }
        let ids = strings(&ids_column, count)?;
        let shas = strings(&shas_column, count)?;
        held.push((name, ids, shas));
    }
    let mut items: Vec<(&str, &str, &str)> = Vec::new();
    for (name, ids, shas) in &held {
        let name = name.to_str().ok()?;
        for (ident, sha) in ids.iter().zip(shas.iter()) {
            items.push((name, ident.to_str().ok()?, sha.to_str().ok()?));
        }
    }
    if items.is_empty() {
        return None;
    }
    items.sort_unstable();
    let size: usize = items.iter().map(|(a, b, c)| a.len() + b.len() + c.len() + 10).sum();
    let mut text = String::with_capacity(size + 2);
    text.push('[');
    for (index, (name, ident, sha)) in items.iter().enumerate() {
        if index > 0 {
            text.push(',');
        }
        text.push_str("[\"");
        text.push_str(name);
        text.push_str("\",\"");
        text.push_str(ident);
        text.push_str("\",\"");
        text.push_str(sha);
        text.push_str("\"]");
    }
    text.push(']');
    Some(hex(&Sha256::digest(text.as_bytes())))
}
