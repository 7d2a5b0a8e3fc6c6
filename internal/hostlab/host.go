package hostlab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrPoweredOff ends the jobs of a host that was powered off, rebooted or
// that crashed.
var ErrPoweredOff = errors.New("hostlab: host powered off")

// errBootTimeout ends a boot that reached Config.BootTimeout.
var errBootTimeout = errors.New("hostlab: boot timeout")

// Host is one guest of the lab.
type Host struct {
	Name  string // "a" or "b"
	lab   *Lab
	index int
	ports [][2]int // each wire's qemu UDP ports, A's and B's

	mu     sync.Mutex // guards the fields below
	run    string     // the boot's directory: command files, logs, sockets
	qemu   *exec.Cmd
	exited chan struct{} // closed when qemu has exited
	ctl    net.Conn      // the guest's rnet.ctl port
	qmp    *qmp
	jobs   map[int]*Job // this boot's jobs still running
	nextID int
	frozen bool // stopped by Freeze: QMP does not answer
}

func newHost(l *Lab, index int, ports [][2]int) *Host {
	return &Host{Name: string(rune('a' + index)), lab: l, index: index, ports: ports}
}

// Addr is this host's IPv4 address on wire i.
func (h *Host) Addr(i int) netip.Addr { return WireAddr(i, h.index) }

// Addr6 is this host's IPv6 address on wire i.
func (h *Host) Addr6(i int) netip.Addr { return WireAddr6(i, h.index) }

// Device is the name of this host's RDMA device on wire i.
func (h *Host) Device(i int) string { return fmt.Sprintf("%s%d", h.lab.cfg.Devices[i], i) }

func (h *Host) peer() *Host {
	if h.index == 0 {
		return h.lab.B
	}
	return h.lab.A
}

func (h *Host) mac(wire int) string { return fmt.Sprintf("52:54:00:8%d:00:%02x", wire, h.index+1) }

// boot starts qemu and waits for the guest's "ready".
func (h *Host) boot(ctx context.Context) error {
	cfg := &h.lab.cfg
	run, err := os.MkdirTemp("", "rnet-host-"+h.Name+".")
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.run = run // for removeFiles, whatever fails next
	h.mu.Unlock()
	if err := os.Mkdir(filepath.Join(run, "jobs"), 0o755); err != nil {
		return err
	}
	var wires strings.Builder
	for i, dev := range cfg.Devices {
		p := 1 - h.index
		fmt.Fprintf(&wires, "%d %s %s %d %s %s %s %s\n", i, h.mac(i), dev, cfg.MTU[h.index],
			WireAddr(i, h.index), WireAddr6(i, h.index), WireAddr(i, p), WireAddr6(i, p))
	}
	for name, content := range map[string]string{"host": h.Name + "\n", "wires": wires.String(), "cwd": cfg.Dir + "\n"} {
		if err := os.WriteFile(filepath.Join(run, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	ctlPath := filepath.Join(run, "ctl.sock")
	ln, err := net.Listen("unix", ctlPath)
	if err != nil {
		return err
	}
	defer ln.Close()
	qmpPath := filepath.Join(run, "qmp.sock")
	args := h.qemuArgs(run, ctlPath, qmpPath)
	cmd := exec.Command("qemu-system-x86_64", args...)
	qlog, err := os.Create(filepath.Join(run, "qemu.log"))
	if err != nil {
		return err
	}
	defer qlog.Close() // qemu has its own copy
	cmd.Stdout, cmd.Stderr = qlog, qlog
	cmd.SysProcAttr = qemuProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("hostlab: host %s: starting qemu: %w", h.Name, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	h.mu.Lock()
	jobs := map[int]*Job{}
	h.run, h.qemu, h.exited, h.jobs, h.frozen = run, cmd, exited, jobs, false
	h.mu.Unlock()
	fmt.Fprintf(h.lab.cfg.Log, "hostlab: host %s booting (qemu pid %d, files in %s)\n", h.Name, cmd.Process.Pid, run)

	ctx, cancel := context.WithTimeoutCause(ctx, cfg.BootTimeout, errBootTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	go func() {
		<-exited
		ln.Close()
	}()
	conn, err := ln.Accept()
	if err != nil {
		return h.bootFailed(ctx, "qemu did not open the control port")
	}
	ready := make(chan string, 1)
	go h.readCtl(conn, exited, ready, jobs)
	select {
	case line := <-ready:
		if line != "ready" {
			return h.bootFailed(ctx, strings.TrimPrefix(line, "failed "))
		}
	case <-exited:
		return h.bootFailed(ctx, "the guest powered off before it was ready")
	case <-ctx.Done():
		if !errors.Is(context.Cause(ctx), errBootTimeout) {
			// The other host's boot failed, or the caller gave up.
			return h.bootFailed(ctx, "boot cancelled before the guest was ready: "+context.Cause(ctx).Error())
		}
		return h.bootFailed(ctx, "no ready within "+cfg.BootTimeout.String())
	}
	q, err := dialQMP(qmpPath)
	if err != nil {
		return h.bootFailed(ctx, "QMP: "+err.Error())
	}
	h.mu.Lock()
	h.ctl, h.qmp = conn, q
	h.mu.Unlock()
	fmt.Fprintf(h.lab.cfg.Log, "hostlab: host %s ready\n", h.Name)
	return nil
}

func (h *Host) qemuArgs(run, ctlPath, qmpPath string) []string {
	cfg := &h.lab.cfg
	k := h.lab.kern
	append_ := "console=ttyS0 quiet loglevel=4 panic=-1 no_timer_check "
	if cfg.Append != "" {
		append_ += cfg.Append + " "
	}
	append_ += "rdinit=/init rnet.stage2=" + k.stage2 + " rnet.moddir=" + k.moddir
	args := []string{
		"-accel", "tcg,thread=multi", "-smp", strconv.Itoa(cfg.CPUs), "-m", strconv.Itoa(cfg.MemMiB),
		"-nodefaults", "-no-user-config", "-display", "none", "-monitor", "none", "-no-reboot",
		"-serial", "file:" + filepath.Join(run, "console.log"),
		"-kernel", k.vmlinuz, "-initrd", k.initrd, "-append", append_,
		"-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
		"-virtfs", "local,path=" + run + ",mount_tag=rnetrun,security_model=none",
		"-virtfs", "local,path=" + strings.ReplaceAll(cfg.Dir, ",", ",,") + ",mount_tag=rnetcwd,security_model=none,multidevs=remap",
		"-device", "virtio-serial-pci",
		"-chardev", "file,id=out,path=" + filepath.Join(run, "out.log"), "-device", "virtserialport,chardev=out,name=rnet.out",
		"-chardev", "socket,id=ctl,path=" + ctlPath, "-device", "virtserialport,chardev=ctl,name=rnet.ctl",
		"-qmp", "unix:" + qmpPath + ",server=on,wait=off",
	}
	for i := range cfg.Devices {
		local, remote := h.ports[i][h.index], h.ports[i][1-h.index]
		if !cfg.Direct {
			remote = h.lab.wires[i].relayPort(h.index)
		}
		args = append(args,
			"-netdev", fmt.Sprintf("dgram,id=w%d,local.type=inet,local.host=127.0.0.1,local.port=%d,remote.type=inet,remote.host=127.0.0.1,remote.port=%d", i, local, remote),
			"-device", fmt.Sprintf("virtio-net-pci,netdev=w%d,mac=%s", i, h.mac(i)))
	}
	return args
}

// bootFailed powers the guest off and returns an error with the tail of its
// logs.
func (h *Host) bootFailed(ctx context.Context, why string) error {
	h.PowerOff()
	h.mu.Lock()
	run := h.run
	h.mu.Unlock()
	var tail strings.Builder
	for _, f := range []string{"setup-failed", "qemu.log", "guest.log", "console.log"} {
		b, _ := os.ReadFile(filepath.Join(run, f))
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		if len(b) > 0 {
			fmt.Fprintf(&tail, "\n--- %s:\n%s", f, strings.Join(lines, "\n"))
		}
	}
	fmt.Fprintf(h.lab.cfg.Log, "hostlab: host %s did not come up: %s%s\n", h.Name, why, tail.String())
	if ctx.Err() != nil && !strings.Contains(why, "within") {
		why += " (" + ctx.Err().Error() + ")"
	}
	return fmt.Errorf("hostlab: host %s did not come up: %s (its logs are in %s until the lab closes; RNET_LAB_KEEP=1 keeps them)", h.Name, why, run)
}

// readCtl reads the guest's messages until qemu exits: the first is sent to
// ready, the rest go to their jobs, which are this boot's.
func (h *Host) readCtl(conn net.Conn, exited chan struct{}, ready chan<- string, jobs map[int]*Job) {
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	first := true
	for sc.Scan() {
		line := sc.Text()
		if first {
			first = false
			ready <- line
			continue
		}
		op, rest, _ := strings.Cut(line, " ")
		idText, arg, _ := strings.Cut(rest, " ")
		id, err := strconv.Atoi(idText)
		if err != nil {
			continue
		}
		h.mu.Lock()
		j := jobs[id]
		h.mu.Unlock()
		if j == nil {
			continue
		}
		switch op {
		case "out":
			j.addLine(arg)
		case "exit":
			code, _ := strconv.Atoi(arg)
			h.mu.Lock()
			delete(jobs, id)
			h.mu.Unlock()
			j.finish(code, nil)
		}
	}
	conn.Close()
	<-exited
	h.mu.Lock()
	var lost []*Job
	for id, j := range jobs {
		lost = append(lost, j)
		delete(jobs, id)
	}
	h.mu.Unlock()
	for _, j := range lost {
		j.finish(-1, ErrPoweredOff)
	}
}

// PowerOff kills the host's qemu, as pulling its power cord would: its
// peers see nothing but silence. Its jobs end with ErrPoweredOff.
func (h *Host) PowerOff() error {
	h.mu.Lock()
	cmd, exited, q := h.qemu, h.exited, h.qmp
	h.qmp, h.ctl, h.qemu = nil, nil, nil
	h.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited: // reaped: its pid may be another process's now
	default:
		cmd.Process.Kill() // qemu has no children; a stopped one dies too
	}
	<-exited
	if q != nil {
		q.close()
	}
	return nil
}

// Freeze stops the host's qemu (SIGSTOP): its CPUs, devices and NICs stop,
// as in a long pause or a live migration's last phase; at the thaw its clock
// leaps forward by the pause. Packets sent to it meanwhile wait in its
// socket's buffer and, past that, are lost. It returns once every thread
// of the qemu has stopped, so that a test timing the freeze from its return
// counts no more than the freeze.
func (h *Host) Freeze() error {
	pid, err := h.signalQemu(syscall.SIGSTOP, true)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Second)
	for !threadsStopped(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("hostlab: host %s: qemu (pid %d) not stopped 1s after SIGSTOP", h.Name, pid)
		}
		time.Sleep(time.Millisecond) // between readings of a real condition
	}
	return nil
}

// threadsStopped reports whether every thread of process pid is in the
// stopped state, as /proc shows it.
func threadsStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// "pid (command) state ...": the command may hold parentheses.
		st := string(stat)
		if i := strings.LastIndexByte(st, ')'); i < 0 || i+2 >= len(st) || st[i+2] != 'T' {
			return false
		}
	}
	return true
}

// Thaw resumes a frozen host.
func (h *Host) Thaw() error {
	_, err := h.signalQemu(syscall.SIGCONT, false)
	return err
}

// signalQemu sends sig to the host's qemu and returns its pid.
func (h *Host) signalQemu(sig syscall.Signal, frozen bool) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.qemu == nil {
		return 0, fmt.Errorf("hostlab: host %s is not running", h.Name)
	}
	// Signal sends to the process, not a pid that may have been reused.
	if err := h.qemu.Process.Signal(sig); err != nil {
		return 0, fmt.Errorf("hostlab: host %s: %w", h.Name, err)
	}
	h.frozen = frozen
	return h.qemu.Process.Pid, nil
}

// Reboot powers the host off and boots it again; its wires and addresses
// stay, its processes and connections are gone.
func (h *Host) Reboot(ctx context.Context) error {
	h.PowerOff()
	h.removeFiles()
	return h.boot(ctx)
}

// LinkDown takes the host's NIC on wire i down, as unplugging its cable
// would: its kernel sees the carrier go and rxe reports the port down.
func (h *Host) LinkDown(i int) error { return h.setLink(i, false) }

// LinkUp puts the host's NIC on wire i back up.
func (h *Host) LinkUp(i int) error { return h.setLink(i, true) }

func (h *Host) setLink(i int, up bool) error {
	h.mu.Lock()
	q, frozen := h.qmp, h.frozen
	h.mu.Unlock()
	if q == nil {
		return fmt.Errorf("hostlab: host %s is not running", h.Name)
	}
	if frozen {
		return fmt.Errorf("hostlab: host %s is frozen: its qemu answers no command until Thaw", h.Name)
	}
	return q.execute("set_link", map[string]any{"name": fmt.Sprintf("w%d", i), "up": up})
}

func (h *Host) removeFiles() {
	h.mu.Lock()
	run := h.run
	h.mu.Unlock()
	if run != "" && os.Getenv("RNET_LAB_KEEP") != "1" {
		os.RemoveAll(run)
	}
}

// Logs returns the host's guest and console logs, for a failure's report.
func (h *Host) Logs() string {
	h.mu.Lock()
	run := h.run
	h.mu.Unlock()
	var b strings.Builder
	for _, f := range []string{"guest.log", "console.log"} {
		data, _ := os.ReadFile(filepath.Join(run, f))
		fmt.Fprintf(&b, "--- host %s %s:\n%s\n", h.Name, f, data)
	}
	return b.String()
}
