package hostlab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"
)

// qmp is a connection to a qemu's machine protocol socket, for commands
// that act on a running guest (set_link).
type qmp struct {
	mu   sync.Mutex // serialises commands
	seq  int
	conn net.Conn
	rd   *bufio.Reader
}

func dialQMP(path string) (*qmp, error) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	q := &qmp{conn: c, rd: bufio.NewReader(c)}
	if _, err := q.reply(); err != nil { // the greeting
		c.Close()
		return nil, err
	}
	if err := q.execute("qmp_capabilities", nil); err != nil {
		c.Close()
		return nil, err
	}
	return q, nil
}

// execute runs one command and returns its error reply as an error. Each
// command carries an id and only the reply with it counts, so that a reply
// that came late for an earlier command is not taken for this one's.
func (q *qmp) execute(cmd string, args map[string]any) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.seq++
	id := q.seq
	req := map[string]any{"execute": cmd, "id": id}
	if args != nil {
		req["arguments"] = args
	}
	b, _ := json.Marshal(req)
	q.conn.SetDeadline(time.Now().Add(10 * time.Second))
	defer q.conn.SetDeadline(time.Time{})
	if _, err := q.conn.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("hostlab: QMP %s: %w", cmd, err)
	}
	for {
		m, err := q.reply()
		if err != nil {
			return fmt.Errorf("hostlab: QMP %s: %w", cmd, err)
		}
		if got, ok := m["id"].(float64); !ok || int(got) != id {
			continue // an event, or a late reply
		}
		if e, ok := m["error"]; ok {
			return fmt.Errorf("hostlab: QMP %s: %v", cmd, e)
		}
		return nil
	}
}

func (q *qmp) reply() (map[string]any, error) {
	line, err := q.rd.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, fmt.Errorf("reply %q: %w", line, err)
	}
	return m, nil
}

func (q *qmp) close() { q.conn.Close() }
