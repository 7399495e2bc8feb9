#!/usr/bin/env python3
"""translate.py SRC DST - rewrite one CUDA source for the CPU emulation
(tests/cudasim/cudasim.h says why). Four rewrites, nothing else:

  kernel<<<grid, block[, smem[, stream]]>>>(args)
      -> qwsim::launcher(kernel, grid, block[, smem[, stream]])(args)
  extern __shared__ [__align__(n)] T name[];
      -> T *name = (T *)qwsim::dynamic_smem();
  __shared__ T a[N][M], b;
      -> static qwsim::shared<T[N][M]> qwsim_shared_a; auto &a = qwsim_shared_a.get(); (and b)
      (refilled with 0xff bytes for every block: nothing left from the last)
  __CUDACC__, __CUDA_ARCH__ -> QWSIM_CUDACC, QWSIM_CUDA_ARCH (defined by
      cudasim.h: our headers then take their device paths)

A #line directive keeps compiler messages pointing at the original file.
"""
import re
import sys

LAUNCH = re.compile(r"(\b[A-Za-z_][\w:]*(?:<[^<>;()]*>)?)\s*<<<([^;]+?)>>>\s*\(")
STATIC_SMEM = re.compile(r"__shared__\s+([^;]+);")
DYN_SMEM = re.compile(r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([A-Za-z_][\w ]*?)\s+(\w+)\s*\[\s*\]\s*;")


def static_shared(m):
    """__shared__ TYPE a[N], b; (TYPE may be several words) -> one
    qwsim::shared holder and one reference per declarator."""
    parts = m.group(1).split(",")
    first = re.fullmatch(r"\s*(.*?)\s*\b(\w+)\s*((?:\[[^\]]+\]\s*)*)", parts[0])
    if not first or not first.group(1):
        raise SystemExit("translate.py: a __shared__ declaration it cannot rewrite: " + m.group(0))
    ctype = first.group(1)
    decls = [(first.group(2), first.group(3))]
    for part in parts[1:]:
        d = re.fullmatch(r"\s*(\w+)\s*((?:\[[^\]]+\]\s*)*)", part)
        if not d:
            raise SystemExit("translate.py: a __shared__ declarator it cannot rewrite: " + part)
        decls.append((d.group(1), d.group(2)))
    out = []
    for name, dims in decls:
        out.append("static qwsim::shared<%s%s> qwsim_shared_%s; auto &%s = qwsim_shared_%s.get();"
                   % (ctype, dims.replace(" ", ""), name, name, name))
    return " ".join(out)


def translate(text):
    text = LAUNCH.sub(lambda m: "qwsim::launcher(%s, %s)(" % (m.group(1), m.group(2)), text)
    text = DYN_SMEM.sub(lambda m: "%s *%s = (%s *)qwsim::dynamic_smem();" % (m.group(1), m.group(2), m.group(1)), text)
    text = STATIC_SMEM.sub(static_shared, text)
    text = text.replace("__CUDACC__", "QWSIM_CUDACC").replace("__CUDA_ARCH__", "QWSIM_CUDA_ARCH")
    if "<<<" in text or "__shared__" in text:
        raise SystemExit("translate.py: a launch or __shared__ it cannot rewrite")
    return text


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        text = f.read()
    with open(dst, "w") as f:
        f.write('#line 1 "%s"\n' % src)
        f.write(translate(text))


if __name__ == "__main__":
    main()
