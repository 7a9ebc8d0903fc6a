"""One JSON-over-HTTP-with-retries policy for every OpenAI-compatible client in jaxtom (the CToM
user simulator, the household LLM scorer, `jaxtom doctor`'s probe of the simulator), so their
timeouts and retries cannot drift apart.

Retried: timeouts, connection errors, HTTP 429 and 5xx, and bodies that are not the JSON the
caller expects (`extract` raising KeyError / IndexError / TypeError / ValueError); a 4xx other
than 429 fails at once, since it will not fix itself. Sleeps backoff_s * 2**(attempt - 1)
between tries and raises `HTTPFailure` naming the last failure when they run out.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any, Callable


class HTTPFailure(RuntimeError):
    """The request failed on every attempt; the message names the last failure."""


def post_json(url: str, body: dict, *, api_key: str | None, timeout_s: float, retries: int,
              backoff_s: float, extract: Callable[[Any], Any] = lambda reply: reply) -> Any:
    """`extract(reply)` of the first well-formed JSON reply to POSTing `body` to `url`."""
    return _request_json(url, json.dumps(body).encode(), api_key=api_key, timeout_s=timeout_s,
                         retries=retries, backoff_s=backoff_s, extract=extract)


def get_json(url: str, *, api_key: str | None = None, timeout_s: float, retries: int = 0,
             backoff_s: float = 0.0, extract: Callable[[Any], Any] = lambda reply: reply) -> Any:
    """`extract(reply)` of the first well-formed JSON reply to a GET of `url` (a health probe:
    one attempt unless `retries` says otherwise)."""
    return _request_json(url, None, api_key=api_key, timeout_s=timeout_s, retries=retries,
                         backoff_s=backoff_s, extract=extract)


def _request_json(url: str, data: bytes | None, *, api_key: str | None, timeout_s: float,
                  retries: int, backoff_s: float, extract: Callable[[Any], Any]) -> Any:
    """POST `data` as JSON (GET when None) under the retry policy above."""
    headers = {"Content-Type": "application/json"} if data is not None else {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    method = "POST" if data is not None else "GET"
    last = "no attempt made"
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff_s * 2 ** (attempt - 1))
        try:
            req = urllib.request.Request(url, data=data, headers=headers, method=method)
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return extract(json.loads(resp.read().decode()))
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code} from {url}"
            if e.code < 500 and e.code != 429:
                break  # a client error will not fix itself
        except (TimeoutError, urllib.error.URLError, ConnectionError, OSError) as e:
            last = f"{type(e).__name__} talking to {url}: {getattr(e, 'reason', e)}"
        except (ValueError, KeyError, IndexError, TypeError, UnicodeDecodeError) as e:
            last = f"malformed response from {url} ({type(e).__name__}: {e})"
    raise HTTPFailure(f"failed after {retries + 1} attempts: {last}")
