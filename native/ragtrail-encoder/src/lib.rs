//! ragtrail's optional native OTLP span encoder.
//!
//! `encode_spans(spans, chunk=0)` returns the serialized `ExportTraceServiceRequest` of a sequence of
//! SDK `ReadableSpan`s: exactly the bytes of ragtrail's pure-Python encoder
//! (`ragtrail.export.otlp_encode`), which are exactly the stock encoder's. It handles the common case
//! only; wherever the pure-Python encoder could log, drop or raise (an int past 64 bits, a lone
//! surrogate, a value or key of a type other than the exact built-in scalars and lists/tuples of them,
//! a time, id or count out of range, a mapping value, ...) it returns `None` ("not mine") and the
//! caller re-encodes the whole batch in Python, which stays the reference.
//!
//! Protobuf is written by hand (varints and length-delimited fields); field numbers follow
//! opentelemetry-proto's trace.proto / common.proto / resource.proto.

mod receipts;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// "Not mine": the batch goes back to the pure-Python encoder.
struct Decline;

type Enc<T> = Result<T, Decline>;

impl From<PyErr> for Decline {
    fn from(_: PyErr) -> Self {
        Decline
    }
}

const FLAGS_LOCAL: u32 = 0x100; // SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
const FLAGS_REMOTE: u32 = 0x300; // ... | SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value > 0x7F {
        out.push((value as u8 & 0x7F) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn bytes_field(out: &mut Vec<u8>, tag: u8, payload: &[u8]) {
    out.push(tag);
    varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

/// A length-delimited field whose body `write` appends: one byte is reserved for the length and the
/// body is shifted in the rare case it needs more.
fn nested(out: &mut Vec<u8>, tag: u8, write: impl FnOnce(&mut Vec<u8>) -> Enc<()>) -> Enc<()> {
    out.push(tag);
    let at = out.len();
    out.push(0);
    write(out)?;
    let size = out.len() - at - 1;
    if size < 0x80 {
        out[at] = size as u8;
    } else {
        let mut header = Vec::with_capacity(10);
        varint(&mut header, size as u64);
        out.splice(at..at + 1, header);
    }
    Ok(())
}

fn utf8<'a>(value: &'a Bound<'_, PyAny>) -> Enc<&'a str> {
    // exact str only; a lone surrogate fails to encode: declined
    if !value.is_exact_instance_of::<PyString>() {
        return Err(Decline);
    }
    Ok(value
        .downcast::<PyString>()
        .map_err(|_| Decline)?
        .to_str()?)
}

/// An optional string field, written when truthy (None and "" are left out).
fn opt_str_field(out: &mut Vec<u8>, tag: u8, value: &Bound<'_, PyAny>) -> Enc<()> {
    if value.is_none() {
        return Ok(());
    }
    let text = utf8(value)?;
    if !text.is_empty() {
        bytes_field(out, tag, text.as_bytes());
    }
    Ok(())
}

/// The body of one AnyValue, for the exact built-in types only (bool before int, as the stock).
fn any_value(out: &mut Vec<u8>, value: &Bound<'_, PyAny>, depth: u32) -> Enc<()> {
    if value.is_none() {
        return Ok(());
    }
    if value.is_exact_instance_of::<PyString>() {
        bytes_field(out, 0x0a, utf8(value)?.as_bytes());
    } else if value.is_exact_instance_of::<PyBool>() {
        out.push(0x10);
        out.push(value.is_truthy()? as u8);
    } else if value.is_exact_instance_of::<PyInt>() {
        let number: i64 = value.extract()?;
        out.push(0x18);
        varint(out, number as u64);
    } else if value.is_exact_instance_of::<PyFloat>() {
        let number = value.downcast::<PyFloat>().map_err(|_| Decline)?.value();
        out.push(0x21);
        out.extend_from_slice(&number.to_bits().to_le_bytes());
    } else if value.is_exact_instance_of::<PyBytes>() {
        bytes_field(
            out,
            0x3a,
            value.downcast::<PyBytes>().map_err(|_| Decline)?.as_bytes(),
        );
    } else if value.is_exact_instance_of::<PyTuple>() || value.is_exact_instance_of::<PyList>() {
        if depth > 32 {
            return Err(Decline);
        }
        nested(out, 0x2a, |out| {
            if let Ok(tuple) = value.downcast_exact::<PyTuple>() {
                for item in tuple.iter() {
                    nested(out, 0x0a, |out| any_value(out, &item, depth + 1))?;
                }
            } else {
                for item in value
                    .downcast_exact::<PyList>()
                    .map_err(|_| Decline)?
                    .iter()
                {
                    nested(out, 0x0a, |out| any_value(out, &item, depth + 1))?;
                }
            }
            Ok(())
        })?;
    } else {
        return Err(Decline); // a mapping, a set, a subclass, anything else: Python's rules apply
    }
    Ok(())
}

fn key_value(
    out: &mut Vec<u8>,
    tag: u8,
    key: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> Enc<()> {
    let key = utf8(key)?; // a key that is not a str: declined
    nested(out, tag, |out| {
        if !key.is_empty() {
            bytes_field(out, 0x0a, key.as_bytes());
        }
        nested(out, 0x12, |out| any_value(out, value, 0))
    })
}

/// The SDK's attribute holder and ReadableSpan's `attributes` property. The public mappings are read
/// key by key in Python (a span's `attributes` is a MappingProxyType over BoundedAttributes, whose
/// `__getitem__` is a Python call: half of a span's encoding); once a BoundedAttributes is immutable
/// (an ended span's, an event's) its plain dict holds exactly what they give, in the same order, and
/// is read directly. `None` when the SDK does not have them as expected: the public mappings are read.
struct Sdk<'py> {
    bounded: Option<Bound<'py, PyAny>>,
    span_attributes: Option<Bound<'py, PyAny>>,
}

impl<'py> Sdk<'py> {
    fn new(py: Python<'py>) -> Self {
        let bounded = py
            .import("opentelemetry.attributes")
            .and_then(|m| m.getattr("BoundedAttributes"))
            .ok();
        let span_attributes = py
            .import("opentelemetry.sdk.trace")
            .and_then(|m| m.getattr("ReadableSpan"))
            .and_then(|c| c.getattr("attributes"))
            .ok();
        Sdk {
            bounded,
            span_attributes,
        }
    }

    /// The plain dict inside `attrs` when it is exactly the SDK's BoundedAttributes and immutable.
    fn held(&self, attrs: &Bound<'py, PyAny>) -> Option<Bound<'py, PyDict>> {
        let bounded = self.bounded.as_ref()?;
        if !attrs.get_type().is(bounded) {
            return None;
        }
        let py = attrs.py();
        if !attrs
            .getattr(intern!(py, "_immutable"))
            .ok()?
            .is_truthy()
            .ok()?
        {
            return None;
        }
        attrs
            .getattr(intern!(py, "_dict"))
            .ok()?
            .downcast_into_exact::<PyDict>()
            .ok()
    }

    /// What a span's `attributes` gives: for a class that keeps ReadableSpan's property, the holder
    /// that property wraps (`None` for none: nothing to encode), else the property's value.
    fn span_attributes(&self, span: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = span.py();
        if let Some(property) = &self.span_attributes {
            if span
                .get_type()
                .getattr(intern!(py, "attributes"))?
                .is(property)
            {
                let holder = span.getattr(intern!(py, "_attributes"))?;
                if self.held(&holder).is_some() || holder.is_none() {
                    return Ok(holder);
                }
            }
        }
        span.getattr(intern!(py, "attributes"))
    }
}

/// Repeated KeyValue fields under `tag`, from None, a dict or any mapping with `items()`.
fn attributes<'py>(
    out: &mut Vec<u8>,
    tag: u8,
    attrs: &Bound<'py, PyAny>,
    sdk: &Sdk<'py>,
) -> Enc<()> {
    if attrs.is_none() {
        return Ok(());
    }
    if let Some(dict) = sdk.held(attrs) {
        for (key, value) in dict.iter() {
            key_value(out, tag, &key, &value)?;
        }
        return Ok(());
    }
    if let Ok(dict) = attrs.downcast_exact::<PyDict>() {
        for (key, value) in dict.iter() {
            key_value(out, tag, &key, &value)?;
        }
        return Ok(());
    }
    // any other mapping (the SDK's MappingProxyType over BoundedAttributes): its keys, then each value,
    // as `items()` would give them without building a pair per key
    for key in attrs.try_iter()? {
        let key = key?;
        key_value(out, tag, &key, &attrs.get_item(&key)?)?;
    }
    Ok(())
}

/// A fixed64 time field, left out when falsy (None or 0).
fn time_field(out: &mut Vec<u8>, tag: u8, value: &Bound<'_, PyAny>) -> Enc<()> {
    if value.is_none() {
        return Ok(());
    }
    let time: u64 = value.extract()?;
    if time != 0 {
        out.push(tag);
        out.extend_from_slice(&time.to_le_bytes());
    }
    Ok(())
}

/// A dropped count (uint32), left out when falsy.
fn count_field(out: &mut Vec<u8>, tag: u8, value: &Bound<'_, PyAny>) -> Enc<()> {
    if value.is_none() {
        return Ok(());
    }
    let count: u32 = value.extract()?;
    if count != 0 {
        out.push(tag);
        varint(out, count as u64);
    }
    Ok(())
}

fn ids(out: &mut Vec<u8>, context: &Bound<'_, PyAny>) -> Enc<()> {
    let py = context.py();
    let trace_id: u128 = context.getattr(intern!(py, "trace_id"))?.extract()?;
    let span_id: u64 = context.getattr(intern!(py, "span_id"))?.extract()?;
    out.extend_from_slice(&[0x0a, 0x10]);
    out.extend_from_slice(&trace_id.to_be_bytes());
    out.extend_from_slice(&[0x12, 0x08]);
    out.extend_from_slice(&span_id.to_be_bytes());
    Ok(())
}

fn flags(out: &mut Vec<u8>, tag: &[u8], remote: bool) {
    out.extend_from_slice(tag);
    out.extend_from_slice(&(if remote { FLAGS_REMOTE } else { FLAGS_LOCAL }).to_le_bytes());
}

fn trace_state(out: &mut Vec<u8>, state: &Bound<'_, PyAny>) -> Enc<()> {
    if state.is_none() || !state.is_truthy()? {
        return Ok(());
    }
    let mut text = String::new();
    for item in state
        .call_method0(intern!(state.py(), "items"))?
        .try_iter()?
    {
        let item = item?;
        let pair = item.downcast_exact::<PyTuple>().map_err(|_| Decline)?;
        if !text.is_empty() {
            text.push(',');
        }
        text.push_str(utf8(&pair.get_item(0)?)?);
        text.push('=');
        text.push_str(utf8(&pair.get_item(1)?)?);
    }
    if !text.is_empty() {
        bytes_field(out, 0x1a, text.as_bytes());
    }
    Ok(())
}

fn events<'py>(out: &mut Vec<u8>, events: &Bound<'py, PyAny>, sdk: &Sdk<'py>) -> Enc<()> {
    let py = events.py();
    for event in events.try_iter()? {
        let event = event?;
        nested(out, 0x5a, |out| {
            time_field(out, 0x09, &event.getattr(intern!(py, "timestamp"))?)?;
            opt_str_field(out, 0x12, &event.getattr(intern!(py, "name"))?)?;
            attributes(out, 0x1a, &event.getattr(intern!(py, "attributes"))?, sdk)?;
            count_field(
                out,
                0x20,
                &event.getattr(intern!(py, "dropped_attributes"))?,
            )
        })?;
    }
    Ok(())
}

fn links<'py>(out: &mut Vec<u8>, links: &Bound<'py, PyAny>, sdk: &Sdk<'py>) -> Enc<()> {
    let py = links.py();
    for link in links.try_iter()? {
        let link = link?;
        nested(out, 0x6a, |out| {
            let context = link.getattr(intern!(py, "context"))?;
            ids(out, &context)?;
            attributes(out, 0x22, &link.getattr(intern!(py, "attributes"))?, sdk)?;
            count_field(out, 0x28, &link.getattr(intern!(py, "dropped_attributes"))?)?;
            flags(
                out,
                &[0x35],
                context.getattr(intern!(py, "is_remote"))?.is_truthy()?,
            );
            Ok(())
        })?;
    }
    Ok(())
}

fn status(out: &mut Vec<u8>, status: &Bound<'_, PyAny>) -> Enc<()> {
    if status.is_none() {
        return Ok(());
    }
    let py = status.py();
    nested(out, 0x7a, |out| {
        opt_str_field(out, 0x12, &status.getattr(intern!(py, "description"))?)?;
        let code: u64 = status
            .getattr(intern!(py, "status_code"))?
            .getattr(intern!(py, "value"))?
            .extract()?;
        if code != 0 {
            out.push(0x18);
            varint(out, code);
        }
        Ok(())
    })
}

/// One Span message's body, fields in number order.
fn span_body<'py>(
    out: &mut Vec<u8>,
    span: &Bound<'py, PyAny>,
    span_kind: &Bound<'py, PyAny>,
    sdk: &Sdk<'py>,
) -> Enc<()> {
    let py = span.py();
    let context = span.call_method0(intern!(py, "get_span_context"))?; // as the Python encoder reads it
    if context.is_none() {
        return Err(Decline);
    }
    ids(out, &context)?;
    trace_state(out, &context.getattr(intern!(py, "trace_state"))?)?;
    let parent = span.getattr(intern!(py, "parent"))?;
    let has_parent = !parent.is_none() && parent.is_truthy()?;
    if has_parent {
        let parent_id: u64 = parent.getattr(intern!(py, "span_id"))?.extract()?;
        out.extend_from_slice(&[0x22, 0x08]);
        out.extend_from_slice(&parent_id.to_be_bytes());
    }
    opt_str_field(out, 0x2a, &span.getattr(intern!(py, "name"))?)?;
    let kind = span.getattr(intern!(py, "kind"))?;
    if !kind.get_type().is(span_kind) {
        return Err(Decline);
    }
    let kind: u8 = kind.getattr(intern!(py, "value"))?.extract()?;
    if kind > 4 {
        return Err(Decline);
    }
    out.extend_from_slice(&[0x30, kind + 1]);
    time_field(out, 0x39, &span.getattr(intern!(py, "start_time"))?)?;
    time_field(out, 0x41, &span.getattr(intern!(py, "end_time"))?)?;
    attributes(out, 0x4a, &sdk.span_attributes(span)?, sdk)?;
    count_field(out, 0x50, &span.getattr(intern!(py, "dropped_attributes"))?)?;
    events(out, &span.getattr(intern!(py, "events"))?, sdk)?;
    count_field(out, 0x60, &span.getattr(intern!(py, "dropped_events"))?)?;
    links(out, &span.getattr(intern!(py, "links"))?, sdk)?;
    count_field(out, 0x70, &span.getattr(intern!(py, "dropped_links"))?)?;
    status(out, &span.getattr(intern!(py, "status"))?)?;
    let remote = has_parent && parent.getattr(intern!(py, "is_remote"))?.is_truthy()?;
    flags(out, &[0x85, 0x01], remote);
    Ok(())
}

/// Encoded spans of one scope (ScopeSpans field 2 entries, headers included).
struct ScopeGroup<'py> {
    scope: Bound<'py, PyAny>,
    spans: Vec<u8>,
}

struct ResourceGroup<'py> {
    resource: Bound<'py, PyAny>,
    scopes: Vec<ScopeGroup<'py>>,
    index: Bound<'py, PyDict>, // scope -> position in `scopes` (dict equality, as the stock groups)
}

fn scope_spans<'py>(out: &mut Vec<u8>, group: &ScopeGroup<'py>, sdk: &Sdk<'py>) -> Enc<()> {
    let py = group.scope.py();
    let scope = &group.scope;
    nested(out, 0x12, |out| {
        nested(out, 0x0a, |out| {
            if scope.is_none() {
                return Ok(());
            }
            opt_str_field(out, 0x0a, &scope.getattr(intern!(py, "name"))?)?;
            opt_str_field(out, 0x12, &scope.getattr(intern!(py, "version"))?)?;
            attributes(out, 0x1a, &scope.getattr(intern!(py, "attributes"))?, sdk)
        })?;
        out.extend_from_slice(&group.spans);
        if !scope.is_none() {
            opt_str_field(out, 0x1a, &scope.getattr(intern!(py, "schema_url"))?)?;
        }
        Ok(())
    })
}

fn resource_spans<'py>(out: &mut Vec<u8>, group: &ResourceGroup<'py>, sdk: &Sdk<'py>) -> Enc<()> {
    let py = group.resource.py();
    let resource = &group.resource;
    nested(out, 0x0a, |out| {
        nested(out, 0x0a, |out| {
            attributes(
                out,
                0x0a,
                &resource.getattr(intern!(py, "attributes"))?,
                sdk,
            )
        })?;
        for scope in &group.scopes {
            scope_spans(out, scope, sdk)?;
        }
        opt_str_field(out, 0x1a, &resource.getattr(intern!(py, "schema_url"))?)
    })
}

fn group_index(
    index: &Bound<'_, PyDict>,
    key: &Bound<'_, PyAny>,
    next: usize,
) -> Enc<(usize, bool)> {
    if let Some(found) = index.get_item(key)? {
        return Ok((found.extract()?, false));
    }
    index.set_item(key, next)?;
    Ok((next, true))
}

fn encode<'py>(py: Python<'py>, spans: &Bound<'py, PyAny>, chunk: usize) -> Enc<Vec<u8>> {
    let span_kind = py.import("opentelemetry.trace")?.getattr("SpanKind")?;
    let sdk = Sdk::new(py);
    let resource_index = PyDict::new(py);
    let mut groups: Vec<ResourceGroup<'py>> = Vec::new();
    let mut last: Option<(
        *mut pyo3::ffi::PyObject,
        *mut pyo3::ffi::PyObject,
        usize,
        usize,
    )> = None;
    let mut body = Vec::with_capacity(4096);
    for (done, span) in spans.try_iter()?.enumerate() {
        let span = span?;
        let resource = span.getattr(intern!(py, "resource"))?;
        let mut scope = span.getattr(intern!(py, "instrumentation_scope"))?;
        if !scope.is_none() && !scope.is_truthy()? {
            scope = py.None().into_bound(py);
        }
        body.clear();
        span_body(&mut body, &span, &span_kind, &sdk)?;
        let (r, s) = match last {
            Some((rp, sp, r, s)) if rp == resource.as_ptr() && sp == scope.as_ptr() => (r, s),
            _ => {
                let (r, new) = group_index(&resource_index, &resource, groups.len())?;
                if new {
                    groups.push(ResourceGroup {
                        resource: resource.clone(),
                        scopes: Vec::new(),
                        index: PyDict::new(py),
                    });
                }
                let group = &mut groups[r];
                let (s, new) = group_index(&group.index, &scope, group.scopes.len())?;
                if new {
                    group.scopes.push(ScopeGroup {
                        scope: scope.clone(),
                        spans: Vec::new(),
                    });
                }
                (r, s)
            }
        };
        // the group objects are kept alive by `groups`, so their pointers stay theirs
        last = Some((resource.as_ptr(), scope.as_ptr(), r, s));
        let target = &mut groups[r].scopes[s].spans;
        target.push(0x12);
        varint(target, body.len() as u64);
        target.extend_from_slice(&body);
        if chunk > 0 && (done + 1) % chunk == 0 {
            py.allow_threads(std::thread::yield_now); // let the app's threads run between chunks
        }
    }
    let total: usize = groups
        .iter()
        .flat_map(|g| g.scopes.iter())
        .map(|s| s.spans.len() + 16)
        .sum();
    let mut out = Vec::with_capacity(total + 1024);
    for group in &groups {
        resource_spans(&mut out, group, &sdk)?;
    }
    Ok(out)
}

/// The serialized ExportTraceServiceRequest of `spans`, or None when the pure-Python encoder must
/// handle the batch (it would drop, log or raise somewhere, or a value is of a type not handled here).
/// `chunk`: when positive, release the GIL after every `chunk` spans.
#[pyfunction]
#[pyo3(signature = (spans, chunk = 0))]
fn encode_spans<'py>(
    py: Python<'py>,
    spans: &Bound<'py, PyAny>,
    chunk: usize,
) -> Option<Bound<'py, PyBytes>> {
    match encode(py, spans, chunk) {
        Ok(out) => Some(PyBytes::new(py, &out)),
        Err(Decline) => None,
    }
}

#[pymodule]
fn ragtrail_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(encode_spans, m)?)?;
    m.add_function(wrap_pyfunction!(receipts::field_json, m)?)?;
    m.add_function(wrap_pyfunction!(receipts::stage_receipt, m)?)?;
    m.add_function(wrap_pyfunction!(receipts::stage_receipt_of, m)?)?;
    m.add_function(wrap_pyfunction!(receipts::records_digest, m)?)?;
    m.add(
        "__doc__",
        "ragtrail's optional native code: the OTLP span encoder (see ragtrail.export.otlp_encode) and \
         the stage receipt's costly steps (see ragtrail.contract.receipts.digests)",
    )?;
    Ok(())
}
