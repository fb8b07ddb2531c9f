package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is the unit of /proc/<pid>/stat's utime and stime: USER_HZ, 100 on every
// Linux the bench runs on.
const clockTicks = 100

// statFields returns the fields of /proc/<pid>/stat from the third (the state) on, so
// that field n is at index n-3; ok is false where there is no such file.
func statFields(pid int) (f []string, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	// The command name, field 2, is in parentheses and may hold spaces: count from its end.
	s := string(data)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return nil, false
	}
	return strings.Fields(s[end+1:]), true
}

// ticksSeconds sums fields holding clock ticks, in seconds.
func ticksSeconds(fields ...string) float64 {
	var ticks int64
	for _, v := range fields {
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return float64(ticks) / clockTicks
}

// procStat returns a process's parent and its CPU time (user + system) so far, in
// seconds, from /proc/<pid>/stat; ok is false where there is no such file.
func procStat(pid int) (ppid int, cpuSeconds float64, ok bool) {
	f, ok := statFields(pid)
	if !ok || len(f) < 13 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, ticksSeconds(f[11], f[12]), true // utime, stime
}

// reapedCPU returns the CPU time (user + system, in seconds) of the children pid has
// waited for: cutime and cstime of /proc/<pid>/stat, 0 where there is no such file.
func reapedCPU(pid int) float64 {
	f, ok := statFields(pid)
	if !ok || len(f) < 15 {
		return 0
	}
	return ticksSeconds(f[13], f[14])
}

// postmasterOf returns the PostgreSQL postmaster whose child backend is (a server
// process of one of the bench's sessions), or ok false when backend is not a local
// process named postgres: the server is elsewhere.
func postmasterOf(backend int) (pid int, ok bool) {
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(backend) + "/comm")
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(comm)), "postgres") {
		return 0, false
	}
	pid, _, ok = procStat(backend)
	return pid, ok
}

// serverCPU sums the CPU time of a local PostgreSQL server: its postmaster, every live
// child of it, and the children it has reaped (sessions that ended). A session's time
// moves from the live children to the reaped ones when it ends, so the sum never goes
// back; without the reaped ones, a window in which sessions ended (other clients', or
// the previous drain's) could read negative.
func serverCPU(postmaster int) (seconds float64) {
	entries, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range entries {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		ppid, cpu, ok := procStat(pid)
		if ok && (pid == postmaster || ppid == postmaster) {
			seconds += cpu
		}
	}
	return seconds + reapedCPU(postmaster)
}

// cpuMark is the CPU time so far of the processes a drain keeps busy: the database
// server (when local), the bench process itself (its embedded brokers, the consumer
// counting arrivals) and the dispatchers. Two marks bracket the drain.
type cpuMark struct {
	server, self, dispatchers float64
	local                     bool // the server's figure is known
	dispatchersKnown          bool // every dispatcher's /proc/<pid>/stat was read
}

func markCPU(postmaster int, local bool, children []*dispatcherProcess) cpuMark {
	m := cpuMark{self: selfCPUSeconds(), local: local, dispatchersKnown: true}
	if local {
		m.server = serverCPU(postmaster)
	}
	for _, c := range children {
		_, cpu, ok := procStat(c.cmd.Process.Pid)
		m.dispatchers += cpu
		m.dispatchersKnown = m.dispatchersKnown && ok
	}
	return m
}

// since is the CPU each spent between start and m.
func (m cpuMark) since(start cpuMark) cpuMark {
	return cpuMark{server: m.server - start.server, self: m.self - start.self, dispatchers: m.dispatchers - start.dispatchers,
		local: m.local && start.local, dispatchersKnown: m.dispatchersKnown && start.dispatchersKnown}
}
