# Sourced by the lab scripts: replace_section FILE NAME replaces the lines
# between "<!-- NAME: begin -->" and "<!-- NAME: end -->" in FILE with its
# stdin (appending the section if FILE lacks it), so each script rewrites
# only its own part of doc/interop-rxe.md.
replace_section() {
  local file=$1 name=$2 body
  body=$(cat)
  [ -f "$file" ] || : >"$file"
  python3 - "$file" "$name" "$body" <<'PY'
import sys
path, name, body = sys.argv[1], sys.argv[2], sys.argv[3]
begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
text = open(path).read()
block = f"{begin}\n{body}\n{end}"
if begin in text and end in text:
    head, rest = text.split(begin, 1)
    text = head + block + rest.split(end, 1)[1]
else:
    text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + block + "\n"
open(path, "w").write(text)
PY
}
