#!/usr/bin/env python3
"""A Go module as a file-system module proxy (the GOPROXY protocol, served from files), tarred.

    go_proxy.py MODULE_DIR MODULE_PATH VERSION OUT_TAR

OUT_TAR unpacked in DIR holds DIR/<module path>/@v/{list, VERSION.info, VERSION.mod, VERSION.zip};
then `GOPROXY=file://DIR go get <module path>@VERSION` fetches it like any published module (with
GOSUMDB=off or GONOSUMDB=<module path>, since the checksum database does not know it), and any
static web server can serve DIR. The zip follows the module zip format (every file under
<module path>@<version>/); timestamps are fixed, so the same module gives the same bytes.
"""
import io
import json
import os
import sys
import tarfile
import zipfile


def module_zip(module_dir, prefix):
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED) as archive:
        for folder, _, names in sorted(os.walk(module_dir)):
            for name in sorted(names):
                path = os.path.join(folder, name)
                info = zipfile.ZipInfo(prefix + "/" + os.path.relpath(path, module_dir), date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, open(path, "rb").read())
    return data.getvalue()


def main(module_dir, module_path, version, out_tar):
    base = module_path.lower() + "/@v/"  # the protocol escapes upper case; our path has none
    if base != module_path + "/@v/":
        sys.exit("go_proxy.py: module path %s has upper-case letters (escape them as !x)" % module_path)
    files = {
        base + "list": (version + "\n").encode(),
        base + version + ".info": json.dumps({"Version": version, "Time": "1980-01-01T00:00:00Z"}).encode(),
        base + version + ".mod": open(os.path.join(module_dir, "go.mod"), "rb").read(),
        base + version + ".zip": module_zip(module_dir, "%s@%s" % (module_path, version)),
    }
    with tarfile.open(out_tar, "w") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
