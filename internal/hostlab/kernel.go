package hostlab

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// kernel is the guest kernel and the scripts both hosts boot with, from the
// cache scripts/softroce-vm keeps.
type kernel struct {
	vmlinuz, initrd, moddir, stage2 string
}

func prepareKernel(ctx context.Context, log io.Writer) (kernel, error) {
	dir, err := scriptsDir()
	if err != nil {
		return kernel{}, err
	}
	setup := exec.CommandContext(ctx, filepath.Join(dir, "host-setup.sh"))
	setup.Stdout, setup.Stderr = log, log
	if err := setup.Run(); err != nil {
		return kernel{}, fmt.Errorf("hostlab: host packages missing (scripts/softroce/host-setup.sh): %w", err)
	}
	cache := os.Getenv("RNET_VM_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "rnet", "softroce")
	}
	prep := exec.CommandContext(ctx, filepath.Join(dir, "guest-kernel.sh"), cache)
	prep.Stderr = log
	out, err := prep.Output()
	if err != nil {
		return kernel{}, fmt.Errorf("hostlab: preparing the guest kernel (scripts/softroce/guest-kernel.sh): %w", err)
	}
	kdir := strings.TrimSpace(string(out))
	kver, err := os.ReadFile(filepath.Join(kdir, "kver"))
	if err != nil {
		return kernel{}, fmt.Errorf("hostlab: guest kernel cache in %s is incomplete; delete it and retry: %w", kdir, err)
	}
	k := kernel{
		vmlinuz: filepath.Join(kdir, "root", "boot", "vmlinuz-"+strings.TrimSpace(string(kver))),
		initrd:  filepath.Join(kdir, "initrd.img"),
		moddir:  filepath.Join(kdir, "root", "lib", "modules"),
		stage2:  filepath.Join(dir, "guest-stage2.sh"),
	}
	for _, f := range []string{k.vmlinuz, k.initrd} {
		if _, err := os.Stat(f); err != nil {
			return kernel{}, fmt.Errorf("hostlab: guest kernel cache in %s is incomplete; delete it and retry: %w", kdir, err)
		}
	}
	return k, nil
}

// freeUDPPort returns a loopback UDP port nothing uses now, for a qemu end
// of a wire.
func freeUDPPort() (int, error) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port, nil
}
