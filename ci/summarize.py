"""Sum the JUnit XML reports of every suite into the closing line CI reads."""

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def main(folder: str) -> int:
    passed = failed = skipped = 0
    rows = []
    for path in sorted(Path(folder).glob("*.xml")):
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError:
            rows.append(f"{path.stem}: unreadable report")
            failed += 1
            continue
        suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
        t = sum(int(s.get("tests", 0)) for s in suites)
        f = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
        sk = sum(int(s.get("skipped", 0)) for s in suites)
        rows.append(f"{path.stem}: {t - f - sk} passed, {f} failed, {sk} skipped")
        passed += t - f - sk
        failed += f
        skipped += sk
    for r in rows:
        print(r)
    if not rows:
        print("no test reports found")
        return 1
    print(f"TOTAL: {passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    return 1 if failed else 0


def install_failure(name: str, folder: str) -> int:
    """A report with one failed case for an environment that did not install."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    Path(folder, f"{name}.xml").write_text(
        f'<testsuite name="{name}" tests="1" failures="1"><testcase classname="install" name="{name}">'
        f'<failure message="environment install failed (see the log above)"/></testcase></testsuite>\n')
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--install-failure"]:
        sys.exit(install_failure(sys.argv[2], sys.argv[3]))
    sys.exit(main(sys.argv[1]))
