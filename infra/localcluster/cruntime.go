package localcluster

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
)

// cLibraries are the C libraries NVIDIA's libcuda.so.1 links besides the loader: the workload binary
// opens it at run time (package cuda), and NVIDIA's container runtime injects the driver's libraries but
// not a C runtime.
var cLibraries = []string{"libc.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libm.so.6"}

// CRuntimeFiles are the files a FROM-scratch image needs to run binary: none for a static binary; for one
// with an ELF interpreter (the workload binary: purego imports dlopen from the C library) that loader and
// cLibraries, copied from this machine's C library (Debian's libc6 here) to the same paths in the image,
// where the loader looks for them. Keys are paths in the image without the leading slash.
func CRuntimeFiles(binary string) (map[string]string, error) {
	f, err := elf.Open(binary)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return nil, fmt.Errorf("%s: reading its ELF interpreter: %w", binary, err)
			}
			interp = string(b[:len(b)-1]) // NUL-terminated
		}
	}
	if interp == "" {
		return nil, nil
	}
	triplet := map[elf.Machine]string{elf.EM_X86_64: "x86_64-linux-gnu", elf.EM_AARCH64: "aarch64-linux-gnu"}[f.Machine]
	files := map[string]string{interp[1:]: interp}
	if _, err := os.Stat(interp); err != nil {
		return nil, fmt.Errorf("%s needs the loader %s, which this machine lacks: install Debian's libc6: %w", binary, interp, err)
	}
	dirs := []string{"/lib/" + triplet, "/usr/lib/" + triplet, "/lib64", "/usr/lib64"}
	for _, lib := range cLibraries {
		found := false
		for _, d := range dirs {
			p := filepath.Join(d, lib)
			if _, err := os.Stat(p); err == nil {
				files[p[1:]] = p
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("%s needs %s for libcuda, found in none of %v: install Debian's libc6", binary, lib, dirs)
		}
	}
	return files, nil
}
