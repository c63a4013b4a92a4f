import csv
import io

from kit.csvsafe import SafeDictWriter, safe_cell


def test_formula_triggers_are_quoted_and_numbers_are_not():
    assert safe_cell("=SUM(A1)") == "'=SUM(A1)"
    assert safe_cell("+1") == "'+1"
    assert safe_cell("@cmd") == "'@cmd"
    assert safe_cell("\tx") == "'\tx"
    assert safe_cell("plain") == "plain"
    assert safe_cell(-3.5) == -3.5


def test_writer_round_trips_through_csv():
    buffer = io.StringIO()
    writer = SafeDictWriter(buffer, fieldnames=["a", "b"])
    writer.writeheader()
    writer.writerow({"a": '=HYPERLINK("http://x")', "b": 2})
    rows = list(csv.DictReader(io.StringIO(buffer.getvalue())))
    assert rows == [{"a": '\'=HYPERLINK("http://x")', "b": "2"}]
