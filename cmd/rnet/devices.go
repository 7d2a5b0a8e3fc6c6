package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/rnet-dev/rnet/internal/verbs"
)

type devicesOpts struct {
	device string // -d: list this one alone
	json   bool
}

var devicesCommand = command{
	name:     "devices",
	synopsis: "rnet devices [-d DEVICE] [--json]",
	summary:  "the RDMA devices: ports, state, MTU, GID tables with their IPs",
	about: `rnet devices lists the machine's RDMA devices (or -d's alone) with their ports, their
state and MTU, and the GID tables with the IP address and netdev of each RoCE GID.
`,
	flags: func() *flag.FlagSet { return devicesFlags(&devicesOpts{}) },
	run: func(args []string, stdout, stderr io.Writer, where *target) error {
		o, err := parseDevices(args)
		if err != nil {
			return err
		}
		return runDevices(o, stdout)
	},
}

func devicesFlags(o *devicesOpts) *flag.FlagSet {
	fs := newFlagSet("devices")
	fs.StringVar(&o.device, "d", "", "list this `device` alone, by name (rxe0, mlx5_0)")
	fs.BoolVar(&o.json, "json", false, "print the devices as JSON")
	return fs
}

func parseDevices(args []string) (devicesOpts, error) {
	var o devicesOpts
	pos, err := parseInterleaved(devicesFlags(&o), args)
	if err != nil {
		return o, err
	}
	if len(pos) > 0 {
		return o, usageErrorf("devices takes no arguments, got %q", pos)
	}
	return o, nil
}

// Device is one entry of `rnet devices --json`.
type Device struct {
	Name          string `json:"name"`
	Transport     string `json:"transport"`
	NodeGUID      string `json:"node_guid"`
	FirmwareVer   string `json:"fw_ver,omitempty"`
	MaxQP         int    `json:"max_qp"`
	MaxQPWR       int    `json:"max_qp_wr"`
	MaxSGE        int    `json:"max_sge"`
	MaxInlineData int    `json:"max_inline_data"`
	Ports         []Port `json:"ports"`
}

// Port is one port of a Device.
type Port struct {
	Port       int    `json:"port"`
	State      string `json:"state"`
	LinkLayer  string `json:"link_layer"`
	ActiveMTU  int    `json:"active_mtu"`
	MaxMTU     int    `json:"max_mtu"`
	MaxMsgSize uint32 `json:"max_msg_size"`
	GIDs       []GID  `json:"gids"`
}

// GID is one valid GID table entry and the IP address it stands for.
type GID struct {
	Index  int    `json:"index"`
	GID    string `json:"gid"`
	Type   string `json:"type"`
	IP     string `json:"ip,omitempty"`
	Netdev string `json:"netdev,omitempty"`
}

func describe(infos []verbs.DeviceInfo, ifname func(int) string) []Device {
	out := make([]Device, 0, len(infos))
	for _, d := range infos {
		dev := Device{
			Name: d.Name, Transport: d.Transport.String(), NodeGUID: d.NodeGUID.String(),
			FirmwareVer: d.FWVersion, MaxQP: d.MaxQP, MaxQPWR: d.MaxQPWR, MaxSGE: d.MaxSGE,
			MaxInlineData: d.MaxInlineData, Ports: []Port{},
		}
		for _, p := range d.Ports {
			port := Port{
				Port: p.Num, State: p.State.String(), LinkLayer: p.LinkLayer.String(),
				ActiveMTU: p.ActiveMTU, MaxMTU: p.MaxMTU, MaxMsgSize: p.MaxMsgSize, GIDs: []GID{},
			}
			for _, g := range p.GIDs {
				e := GID{Index: g.Index, GID: netip.AddrFrom16(g.GID).String(), Type: g.Type.String()}
				if g.Addr.IsValid() {
					e.IP = g.Addr.String()
				}
				if g.Ifindex > 0 && ifname != nil {
					e.Netdev = ifname(g.Ifindex)
				}
				port.GIDs = append(port.GIDs, e)
			}
			dev.Ports = append(dev.Ports, port)
		}
		out = append(out, dev)
	}
	return out
}

func ifName(i int) string {
	if ifc, err := net.InterfaceByIndex(i); err == nil {
		return ifc.Name
	}
	return ""
}

func runDevices(o devicesOpts, stdout io.Writer) error {
	infos, err := verbs.Devices()
	return reportDevices(o, stdout, infos, err)
}

// reportDevices prints a device listing; err says it stopped early (the
// devices listed are printed, and the command then fails).
func reportDevices(o devicesOpts, stdout io.Writer, infos []verbs.DeviceInfo, err error) error {
	if err != nil && len(infos) == 0 {
		return explainDevices(err)
	}
	if o.device != "" {
		i := slices.IndexFunc(infos, func(d verbs.DeviceInfo) bool { return d.Name == o.device })
		switch {
		case i < 0 && err != nil:
			return fmt.Errorf("-d %s: not among the devices listed before the listing stopped: %w", o.device, err)
		case i < 0:
			names := make([]string, len(infos))
			for i, d := range infos {
				names[i] = d.Name
			}
			return fmt.Errorf("no RDMA device %q on this machine; it has %s", o.device, strings.Join(names, ", "))
		}
		infos, err = infos[i:i+1], nil
	}
	devs := describe(infos, ifName)
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(devs); jerr != nil {
			return jerr
		}
	} else {
		printDevices(stdout, devs)
	}
	if err != nil {
		return fmt.Errorf("listing stopped early: %w", err)
	}
	return nil
}

func printDevices(w io.Writer, devs []Device) {
	for i, d := range devs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s  %s  node_guid %s  max_qp_wr %d  max_sge %d  max_inline %d\n",
			d.Name, d.Transport, d.NodeGUID, d.MaxQPWR, d.MaxSGE, d.MaxInlineData)
		for _, p := range d.Ports {
			fmt.Fprintf(w, "  port %d  %s  %s  mtu %d (max %d)\n", p.Port, p.State, p.LinkLayer, p.ActiveMTU, p.MaxMTU)
			if len(p.GIDs) == 0 {
				fmt.Fprintln(w, "    (no valid GIDs)")
				continue
			}
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "    GID\tINDEX\tTYPE\tIP\tNETDEV")
			for _, g := range p.GIDs {
				fmt.Fprintf(tw, "    %s\t%d\t%s\t%s\t%s\n", g.GID, g.Index, g.Type, orDash(g.IP), orDash(g.Netdev))
			}
			tw.Flush()
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
