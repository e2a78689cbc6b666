//! The body of an upstream request, in parts: what is new in each request (model, messages,
//! settings) around the serialised tool specs, which are the same for every request of an
//! engine and usually the largest part (about 11 KB for the built-in set). The specs are
//! shared, not copied: a stream that is open for minutes holds only its own bytes, and the
//! parts go out with one vectored write.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

/// A request body: JSON split into parts. Cheap to clone (for retries).
#[derive(Debug, Clone, Default)]
pub struct RequestBody {
    parts: Vec<Bytes>,
}

impl RequestBody {
    pub fn from_parts(parts: Vec<Bytes>) -> RequestBody {
        RequestBody {
            parts: parts.into_iter().filter(|p| !p.is_empty()).collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The whole body in one buffer (copies when there is more than one part).
    pub fn to_bytes(&self) -> Bytes {
        match self.parts.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => Bytes::from(many.concat()),
        }
    }

    pub(crate) fn into_reqwest(self) -> reqwest::Body {
        let remaining = self.len() as u64;
        reqwest::Body::wrap(Parts {
            parts: self.parts.into_iter().rev().collect(),
            remaining,
        })
    }
}

impl From<Bytes> for RequestBody {
    fn from(b: Bytes) -> RequestBody {
        RequestBody::from_parts(vec![b])
    }
}

impl From<String> for RequestBody {
    fn from(s: String) -> RequestBody {
        RequestBody::from(Bytes::from(s))
    }
}

/// The sending side: parts in reverse order, popped one frame at a time, with an exact
/// length so the request carries `content-length` (not chunked, which some servers refuse).
struct Parts {
    parts: Vec<Bytes>,
    remaining: u64,
}

impl http_body::Body for Parts {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let next = self.parts.pop();
        if let Some(p) = &next {
            self.remaining -= p.len() as u64;
        }
        Poll::Ready(next.map(|p| Ok(Frame::data(p))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_join_to_the_whole_body() {
        let b = RequestBody::from_parts(vec![
            Bytes::from_static(b"{\"a\":1,\"tools\":"),
            Bytes::new(),
            Bytes::from_static(b"[]"),
            Bytes::from_static(b"}"),
        ]);
        assert_eq!(b.len(), 18);
        assert_eq!(&b.to_bytes()[..], b"{\"a\":1,\"tools\":[]}");
        assert_eq!(&RequestBody::from(String::from("x")).to_bytes()[..], b"x");
    }
}
