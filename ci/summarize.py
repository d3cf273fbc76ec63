"""Sum the JUnit XML reports of every suite into the closing line CI reads."""

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def main(folder: str) -> int:
    passed = failed = skipped = 0
    rows = []
    cases = []  # (seconds, report, test)
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
        secs = sum(float(s.get("time", 0) or 0) for s in suites)
        rows.append(f"{path.stem}: {t - f - sk} passed, {f} failed, {sk} skipped, {secs:.0f} s")
        for c in root.iter("testcase"):
            try:
                cases.append((float(c.get("time", 0) or 0), path.stem, f"{c.get('classname', '')}::{c.get('name', '')}"))
            except ValueError:
                pass
        passed += t - f - sk
        failed += f
        skipped += sk
    if cases:
        # scenarios run ahead in a pool: a test's time includes waiting for the ones it reads
        print("ten slowest tests:")
        for secs, report, name in sorted(cases, reverse=True)[:10]:
            print(f"  {secs:7.1f} s  {report}  {name}")
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
