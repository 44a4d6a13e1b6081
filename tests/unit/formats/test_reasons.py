"""A reason quotes the record last, and what goes to logs leaves the quote out."""

import pyarrow as pa

from compactor.formats.decoder import Decoder
from compactor.formats.reasons import loggable, quoting
from compactor.formats.spec import RecordFormat


def test_loggable_stops_before_the_quote() -> None:
    reason = quoting("value: id: expected INT, found a string", '"alice@example.com"')
    assert reason == 'value: id: expected INT, found a string; quoting the record: ' \
                     '"alice@example.com"'
    assert loggable(reason) == "value: id: expected INT, found a string"
    assert loggable("value: not valid JSON: Expecting value") == \
        "value: not valid JSON: Expecting value"


def test_no_byte_of_an_undecodable_record_is_in_its_loggable_reason() -> None:
    decoder = Decoder(RecordFormat("json", "email INT, zip INT"), None, "t", False)
    values = [b'{"email": "alice@example.com"}', b'{"zip": "N1 9GU"}',
              "café".encode("latin-1") + b" bob@example.org", b'{"email": 7}']
    decoded = decoder.decode(pa.array(values, pa.binary()))
    reasons = decoded.reasons
    assert reasons[3] is None
    assert all(r is not None for r in reasons[:3])
    # A decoder's message quotes what it saw: here the byte UTF-8 could not read.
    for reason, secret in zip(reasons[:3], ("alice@", "N1 9GU", "0xe9"), strict=True):
        assert reason is not None
        assert secret in reason  # the row's reason, erased with the row, quotes it
        assert secret not in loggable(reason)
    assert loggable(reasons[0] or "").endswith("email: expected INT, found a string")
    assert loggable(reasons[2] or "") == "not UTF-8 text"


def test_a_registry_format_quotes_only_the_first_byte_it_found() -> None:
    decoder = Decoder(RecordFormat("avro"), {"url": "http://127.0.0.1:9"}, "t", False)
    [reason] = decoder.decode(pa.array([b"{\"email\": \"alice@example.com\"}"])).reasons
    assert reason is not None and reason.endswith("; quoting the record: the first byte is 0x7b")
    assert loggable(reason) == ("not in the Schema Registry wire format: no magic byte 0x00 and "
                                "schema id first (was it produced with a Confluent avro "
                                "serializer?)")
