"""Translates the analysis views (../views.sql, DuckDB) into Spark SQL (views.sql beside this file).

Run `python3 scaletrace/src/analyze/spark/translate.py` after changing ../views.sql; the test
suite (tests/test_spark_views.py) fails while the Spark file is not what this script makes of the
DuckDB one, and runs both on the same stores to compare their findings.

The translation is sqlglot's (DuckDB to Spark), plus what it leaves to us:
- DuckDB macros have no Spark equivalent that takes any type, so each call is replaced by the
  macro's body with its arguments in place (macros calling macros included);
- views become session (temporary) views: the table views they read are temporary too;
- a few DuckDB functions sqlglot passes through unchanged are rewritten (see `spark_only`).
"""
import re
import sys
from pathlib import Path

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.qualify import qualify
from sqlglot.tokens import TokenType

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "views.sql"
TARGET = HERE / "views.sql"
# The tables' columns, as `scaletrace schema` documents them.
SCHEMA_DOC = HERE.parents[3] / "docs" / "schema.md"

MACRO = re.compile(r"^\s*CREATE OR REPLACE MACRO (\w+)\(([^)]*)\) AS\s+(.*)$", re.S)


def statements(text, dialect="duckdb"):
    """The script's statements, split at the semicolons the SQL tokenizer sees (not those in
    strings or comments)."""
    start = 0
    for token in sqlglot.tokenize(text, read=dialect):
        if token.token_type == TokenType.SEMICOLON:
            yield text[start:token.start]
            start = token.end + 1
    if text[start:].strip():
        yield text[start:]


class Macros:
    """DuckDB macros by name: parameters and body."""

    def __init__(self):
        self.macros = {}

    def define(self, name, params, body):
        self.macros[name.lower()] = ([p.strip().lower() for p in params.split(",") if p.strip()],
                                     self.expand(sqlglot.parse_one(body, read="duckdb")))

    def expand(self, tree):
        """`tree` with every macro call replaced by the macro's body, its arguments in place."""

        def call(node):
            if not isinstance(node, exp.Anonymous) or node.name.lower() not in self.macros:
                return node
            params, body = self.macros[node.name.lower()]
            if len(params) != len(node.expressions):
                raise SystemExit(f"macro {node.name}: {len(node.expressions)} arguments, "
                                 f"{len(params)} parameters")
            args = dict(zip(params, (self.expand(a) for a in node.expressions)))

            def argument(n):
                if isinstance(n, exp.Column) and not n.table and n.name.lower() in args:
                    return exp.Paren(this=args[n.name.lower()].copy())
                return n

            return exp.Paren(this=body.copy().transform(argument))

        return tree.transform(call)


def table_columns():
    """Each table's column names (docs/schema.md), and the columns the table views add."""
    tables, current = {}, None
    for line in SCHEMA_DOC.read_text().splitlines():
        if m := re.match(r"^## `(\w+)`", line):
            current = tables.setdefault(m.group(1), {})
        elif (m := re.match(r"^\| `(\w+)` \| ([^|]+) \|", line)) and current is not None:
            current[m.group(1)] = "TEXT"
    tables["gpu_events"]["import_file"] = "TEXT"
    # the thresholds' and the baseline's views, which `scaletrace sql` writes before the views
    params = re.findall(r'^\s*"(\w+)",\s*$', (HERE.parent / "params.rs").read_text(), re.M)
    if len(params) < 10:
        raise SystemExit("translate.py: cannot find the thresholds' names in params.rs")
    tables["st_params"] = {name: "TEXT" for name in ["window_us"] + params}
    tables["st_baseline"] = {name: "TEXT" for name in ["step_us", "iterations", "ranks", "label"]}
    return tables


def output_columns(query):
    """The names a query's rows have (its first branch's, for a set operation)."""
    while isinstance(query, exp.SetOperation):
        query = query.left
    return [name for name in query.named_selects]


def expand_stars(tree, schema):
    """`tree` (a view's query) with `*`, `* EXCLUDE` and `* REPLACE` written out as columns,
    from the tables' and earlier views' columns in `schema`: Spark has no EXCLUDE, REPLACE or
    UNION BY NAME, and a union by name needs both sides' names."""
    return qualify(tree, schema=schema, dialect="duckdb", validate_qualify_columns=False,
                   quote_identifiers=False, identify=False)


def union_by_name(query):
    """A chain of `UNION [ALL] BY NAME` as plain unions: every branch selects every name of
    the chain, in the order they first appear, NULL where a branch lacks one."""

    def by_name(node):
        if not (isinstance(node, exp.Union) and node.args.get("by_name")):
            return node
        branches, stack = [], [node]
        while stack:
            n = stack.pop()
            if isinstance(n, exp.Union) and n.args.get("by_name"):
                stack += [n.right, n.left]
            else:
                branches.append(n)
        names = []
        for b in branches:
            if not isinstance(b, exp.Select):
                raise SystemExit(f"UNION BY NAME of a {type(b).__name__}: write it as a SELECT")
            names += [n for n in b.named_selects if n not in names]
        for b in branches:
            own = {e.alias_or_name: e for e in b.expressions}
            b.set("expressions", [own.get(n) or exp.alias_(exp.Null(), n) for n in names])
        out = branches[0]
        for b in branches[1:]:
            out = exp.union(out, b, distinct=bool(node.args.get("distinct")))
        for key in ("with", "with_", "order", "limit"):  # the chain's own clauses
            if node.args.get(key):
                out.set(key, node.args[key])
        return out

    # a rewritten chain's children (its CTEs' own chains) are not visited again: repeat
    while any(isinstance(n, exp.Union) and n.args.get("by_name") for n in query.walk()):
        query = query.transform(by_name)
    return query


STRFTIME = {"%Y": "yyyy", "%m": "MM", "%d": "dd", "%H": "HH", "%M": "mm", "%S": "ss", "%f": "SSSSSS"}


def date_format(fmt):
    """A strftime format as a Spark datetime pattern, its other letters quoted (sqlglot leaves
    the T and Z of an ISO time unquoted, which Spark refuses)."""
    out = ""
    for part in re.split(r"(%.)", fmt):
        if part in STRFTIME:
            out += STRFTIME[part]
        elif part.startswith("%"):
            raise SystemExit(f"translate.py: strftime {part} has no Spark pattern here")
        else:
            out += re.sub(r"([A-Za-z]+)", r"'\1'", part)
    return out


def strip_zeros(text):
    """A formatted number's trailing fractional zeros removed, and its point if none are left
    (as C's %g prints)."""
    return f"regexp_replace(regexp_replace({text}, '(\\\\.[0-9]*?)0+$', '$1'), '\\\\.$', '')"


def fixed(value, digits):
    """`value` with `digits` (an SQL expression) decimals. format_number rounds the exact binary
    value half to even, as C does (58.455 is 58.4549... and prints 58.45, 552.5 prints 552);
    Java's %f rounds the shortest decimal form half up (58.46, 553)."""
    pattern = f"IF(({digits}) > 0, concat('0.', repeat('0', {digits})), '0')"
    return f"format_number({value}, {pattern})"


def general(value, precision):
    """C's %.Pg in Spark SQL: P significant digits, trailing zeros dropped, an exponent below
    1e-4 or from 10^P on (Java's %g keeps the zeros and writes no exponent below 10^P)."""
    x = f"({value.sql(dialect='spark')})"
    e1 = f"floor(log10(abs({x})))"
    # the exponent after rounding: 9.996 is 10.0 at three digits
    e = f"({e1} + IF(abs({x}) / power(10, {e1}) >= {10 - 5 * 10 ** -precision!r}, 1, 0))"
    plain = strip_zeros(fixed(x, f"{precision - 1} - {e}"))
    mantissa = strip_zeros(fixed(f"{x} / power(10, {e})", str(precision - 1)))
    # at least two exponent digits, as C (lpad would also cut a third)
    scientific = (f"concat({mantissa}, 'e', IF({e} < 0, '-', '+'), "
                  f"IF(abs({e}) < 10, '0', ''), CAST(abs({e}) AS STRING))")
    return sqlglot.parse_one(
        f"CASE WHEN {x} = 0 THEN '0' WHEN {e} >= -4 AND {e} < {precision} THEN {plain} "
        f"ELSE {scientific} END", read="spark")


def printf(fmt, *args):
    """DuckDB's printf in Spark's format_string, with C's rounding of %.Nf (`fixed`) and C's
    %.Ng (`general`). DuckDB's printf is NULL when an argument is; Spark prints "null"."""
    args, out, parts = list(args), "", re.split(r"(%[-+ #0]*\d*(?:\.\d+)?[a-zA-Z%])", fmt.name)
    originals = [a.copy() for a in args]
    position = 0
    for part in parts:
        spec = re.fullmatch(r"%([-+ #0]*)(\d*)(?:\.(\d+))?([a-zA-Z%])", part)
        if not spec or spec.group(4) == "%":
            out += part
            continue
        flags, width, digits, conv = spec.groups()
        if conv in ("f", "g"):
            if width or flags not in ("", "+") or (conv == "g" and flags):
                raise SystemExit(f"translate.py: printf {part} has no Spark form here")
            n = int(digits or 6)
            value = args[position]
            if conv == "g":
                text = general(value, n or 1)
            else:
                text = sqlglot.parse_one(fixed(value.sql(dialect="spark"), str(n)), read="spark")
            if flags == "+":
                text = exp.DPipe(this=exp.If(this=exp.GTE(this=value.copy(), expression=exp.Literal.number(0)),
                                             true=exp.Literal.string("+"), false=exp.Literal.string("")),
                                 expression=text)
            args[position] = text
            out += "%s"
        else:
            out += part
        position += 1
    text = exp.Anonymous(this="format_string", expressions=[exp.Literal.string(out), *args])
    nullable = [a for a in originals if not isinstance(a, exp.Literal)]
    if not nullable:
        return text
    any_null = exp.or_(*(exp.Is(this=a, expression=exp.Null()) for a in nullable))
    return exp.If(this=any_null, true=exp.Null(), false=text)


def string_agg(concat, condition):
    """DuckDB's string_agg(x, sep ORDER BY ...) [FILTER (WHERE condition)] in Spark: its
    LISTAGG ... WITHIN GROUP fails at run time with DISTINCT and FILTER (a ClassCastException in
    Spark 4.3), so the values are collected, sorted and joined. NULL for no values, as DuckDB."""
    spark = lambda e: e.sql(dialect="spark")
    body, keys = concat.this, []
    if isinstance(body, exp.Order):
        body, keys = body.this, body.expressions
    distinct = isinstance(body, exp.Distinct)
    value = body.expressions[0] if distinct else body
    where = f" FILTER (WHERE {spark(condition)})" if condition is not None else ""
    sep = spark(concat.args["separator"])
    if distinct:
        if keys and (len(keys) != 1 or keys[0].this != value or keys[0].args.get("desc")):
            raise SystemExit(f"translate.py: string_agg(DISTINCT x ORDER BY y): no Spark form here")
        values = f"array_sort(collect_set({spark(value)}){where})"
    else:
        # sorted as structs of the keys (a descending key negated: they are numbers here)
        fields = [f"{'-' if k.args.get('desc') else ''}({spark(k.this)}) AS k{i}" for i, k in enumerate(keys)]
        struct = f"struct({', '.join(fields + [f'{spark(value)} AS v'])})"
        values = f"transform(array_sort(collect_list({struct}){where}), s -> s.v)"
    return sqlglot.parse_one(f"CASE WHEN size({values}) = 0 THEN NULL ELSE array_join({values}, {sep}) END",
                             read="spark")


def zip_unnests(select):
    """DuckDB unnests the lists of one SELECT side by side (by position); Spark allows one
    generator per SELECT and would pair every element with every other. The one form the views
    use, a list beside its positions (`unnest(l) AS x, unnest(range(0, len(l))) AS i`), is
    Spark's posexplode; any other second unnest stops the translation."""
    unnests = [e for e in select.expressions
               if isinstance(e, exp.Alias) and isinstance(e.this, exp.Explode)]
    if len(unnests) < 2:
        return select
    values = [u for u in unnests if not isinstance(u.this.this, exp.GenerateSeries)]
    positions = [u for u in unnests if isinstance(u.this.this, exp.GenerateSeries)]
    if len(values) == 1 and len(positions) == 1:
        series = positions[0].this.this
        start, end = series.args.get("start"), series.args.get("end")
        if (series.args.get("is_end_exclusive") and isinstance(start, exp.Literal)
                and start.name == "0" and isinstance(end, exp.Length)
                and end.this == values[0].this.this):
            zipped = exp.Aliases(this=exp.Posexplode(this=values[0].this.this.copy()),
                                 expressions=[exp.to_identifier(positions[0].alias),
                                              exp.to_identifier(values[0].alias)])
            kept = [e for e in select.expressions if e is not positions[0]]
            select.set("expressions", [zipped if e is values[0] else e for e in kept])
            return select
    raise SystemExit("translate.py: more than one unnest in a SELECT has no Spark form here "
                     f"(only a list beside its positions): {select.sql('duckdb')[:200]}")


def spark_only(tree):
    """DuckDB constructs sqlglot leaves as they are, in their Spark form."""

    unsigned = {exp.DataType.Type.UBIGINT: "BIGINT", exp.DataType.Type.UINT: "BIGINT",
                exp.DataType.Type.USMALLINT: "INT", exp.DataType.Type.UTINYINT: "SMALLINT"}

    def rewrite(node):
        if isinstance(node, exp.Select):
            return zip_unnests(node)
        if isinstance(node, exp.TimeToStr):
            return exp.Anonymous(this="date_format", expressions=[
                node.this, exp.Literal.string(date_format(node.args["format"].name))])
        if isinstance(node, exp.Filter) and isinstance(node.this, exp.GroupConcat):
            return string_agg(node.this, node.expression.this)
        if isinstance(node, exp.GroupConcat):
            return string_agg(node, None)
        if (isinstance(node, (exp.Cast, exp.TryCast)) and node.to.is_type(*exp.DataType.INTEGER_TYPES)
                and not isinstance(node.this.unnest(), (exp.Literal, exp.Null, exp.Predicate,
                                                        exp.Connector, exp.Not, exp.Boolean))):
            # DuckDB rounds a number cast to an integer, Spark truncates it: a double half to
            # even (2.5 is 2), a decimal half away from zero (2.5 is 3)
            value = node.this
            node.set("this", exp.If(
                this=exp.In(this=exp.Anonymous(this="typeof", expressions=[value.copy()]),
                            expressions=[exp.Literal.string("double"), exp.Literal.string("float")]),
                true=exp.Anonymous(this="bround", expressions=[value.copy()]),
                false=exp.Anonymous(this="round", expressions=[value])))
            return node
        if isinstance(node, exp.UnixToTime) and not node.args.get("scale"):
            # DuckDB's to_timestamp(seconds) keeps microseconds, rounded; sqlglot's
            # FROM_UNIXTIME goes through a text of whole seconds
            micros = exp.Cast(this=exp.Mul(this=exp.Paren(this=node.this),
                                           expression=exp.Literal.number(1000000)),
                              to=exp.DataType.build("BIGINT"))
            return exp.Anonymous(this="timestamp_micros", expressions=[micros])
        if isinstance(node, exp.DataType) and node.this in unsigned:
            # Spark has no unsigned integers; the table views read them as signed ones wide
            # enough for every value scaletrace writes (byte counters, socket cookies < 2^63)
            return exp.DataType.build(unsigned[node.this])
        if isinstance(node, exp.ArrayAgg) and isinstance(node.this, exp.Order):
            # list(x ORDER BY x): Spark's collect_list has no order; sorted after
            order = node.this
            keys = order.expressions
            if len(keys) != 1 or keys[0].this != order.this or keys[0].args.get("desc"):
                raise SystemExit(f"translate.py: a list ordered other than by its own values "
                                 f"ascending has no Spark form here: {node.sql('duckdb')}")
            return exp.Anonymous(this="array_sort", expressions=[
                exp.Anonymous(this="collect_list", expressions=[order.this])])
        if isinstance(node, exp.IgnoreNulls) and isinstance(node.this, exp.AnyValue):
            # DuckDB's any_value skips nulls; Spark's does when asked, and has no IGNORE NULLS
            # beside a FILTER
            return exp.Anonymous(this="any_value", expressions=[node.this.this, exp.true()])
        if isinstance(node, exp.Length):
            # views.sql measures only lists (len); see `translate`
            return exp.ArraySize(this=node.this)
        if isinstance(node, exp.PercentileCont) and not isinstance(node.parent, exp.WithinGroup):
            # DuckDB's quantile_cont(x, q): Spark's exact, interpolating percentile(x, q)
            return exp.Anonymous(this="percentile", expressions=[node.this, node.expression])
        if isinstance(node, exp.Anonymous):
            name = node.name.lower()
            if name == "epoch_ns":
                # Spark reads the tables' nanosecond timestamps as nanoseconds since the epoch
                # (bigint): exact, where its own timestamps stop at microseconds
                return node.expressions[0]
            if name == "printf":
                return printf(*node.expressions)
            if name == "list_slice":
                # DuckDB: from, to (1-based, inclusive); Spark's slice: from, length
                lst, begin, end = node.expressions
                length = exp.Add(this=exp.Sub(this=end.copy(), expression=begin.copy()),
                                 expression=exp.Literal.number(1))
                return exp.Anonymous(this="slice", expressions=[lst, begin, length])
            if name == "to_microseconds":
                # an interval added to such a timestamp: nanoseconds too
                return exp.Paren(this=exp.Mul(this=exp.Paren(this=node.expressions[0]),
                                              expression=exp.Literal.number(1000)))
        return node

    def visit(node):
        new = rewrite(node)
        # sqlglot does not visit a replacement's children: the arguments of a rewritten call
        # may need rewriting too (no replacement matches a rule again)
        return new if new is node else new.transform(visit)

    return tree.transform(visit)


def needs_columns(query):
    """Whether Spark needs `query`'s stars written out (see `expand_stars`)."""
    for node in query.walk():
        if isinstance(node, exp.Star) and (node.args.get("except") or node.args.get("replace")):
            return True
        if isinstance(node, exp.Union) and node.args.get("by_name"):
            return True
    return False


def translate(text):
    if re.search(r"\b(length|strlen|char_length)\(", re.sub(r"--.*", "", text), re.I):
        # Spark's length() takes strings only and size() lists only; DuckDB's len() both
        raise SystemExit("translate.py: views.sql may measure lists only, with len()")
    macros = Macros()
    schema = table_columns()
    out = []
    for sql in statements(text):
        if not sql.strip() or all(l.strip().startswith("--") or not l.strip() for l in sql.splitlines()):
            continue
        m = MACRO.match(re.sub(r"^\s*--.*$", "", sql, flags=re.M))
        if m:
            macros.define(*m.groups())
            continue
        tree = sqlglot.parse_one(sql, read="duckdb")
        if isinstance(tree, exp.Create) and tree.kind == "VIEW":
            props = tree.args.get("properties") or exp.Properties(expressions=[])
            props.append("expressions", exp.TemporaryProperty())
            tree.set("properties", props)
        tree = macros.expand(tree)
        if isinstance(tree, exp.Create) and tree.kind == "VIEW":
            query = tree.expression
            try:
                columns = output_columns(expand_stars(query.copy(), schema))
            except Exception as e:
                print(f"{tree.this.name}: {e}", file=sys.stderr)
                columns = output_columns(query)
            if needs_columns(query):
                tree.set("expression", union_by_name(expand_stars(query, schema)))
            schema[tree.this.name] = {c: "TEXT" for c in columns}
        tree = spark_only(tree)
        out.append(tree.sql(dialect="spark", pretty=True,
                            unsupported_level=sqlglot.ErrorLevel.RAISE) + ";\n")
    return out


def main():
    header = ("-- scaletrace analysis views for Spark SQL, made from ../views.sql by translate.py:\n"
              "-- do not edit; change ../views.sql and run translate.py.\n\n")
    text = header + "\n".join(translate(SOURCE.read_text()))
    if "--check" in sys.argv:
        if TARGET.read_text() != text:
            sys.exit(f"{TARGET} is not what translate.py makes of {SOURCE}: run translate.py")
        return
    TARGET.write_text(text)


if __name__ == "__main__":
    main()
