// go-smf: a minimal SMF built on github.com/wmnsk/go-pfcp that drives the N4 scenario of
// interop/n4_go.py against a running `upf run --n4 ADDR`.
//
//	go-smf -upf 127.0.0.1:PORT [-smf 127.0.0.2] [-other 127.0.0.6] [-timeout 2s]
//
// It prints one line per check, "ok NAME" or "FAIL NAME: why", in a fixed order (the names
// are listed in interop/n4_go.py), and exits 1 if any check failed. Every receive waits at most
// -timeout; the whole run is bounded by -deadline.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"
)

const (
	smfFQDN   = "smf.example"
	cpSEID    = uint64(0x1111)
	cpSEIDBad = uint64(0x2222)
	cpSEIDOff = uint64(0x3333)
	unknownUP = uint64(0xDEADBEEF00C0FFEE)
	gnbAddr   = "127.0.0.3"
	gnbTEID   = uint32(0x1234)
	uePool    = "10.60.0.0/16"
)

// ---------------------------------------------------------------- reporting

var failures int

func report(name string, err error) {
	if err != nil {
		failures++
		fmt.Printf("FAIL %s: %v\n", name, err)
	} else {
		fmt.Printf("ok %s\n", name)
	}
}

// step is one request/response exchange: `response` is checked first (type, sequence
// number, header SEID); every further check fails with the response's error if it failed.
type step struct {
	name string
	err  error
}

func (s *step) check(name string, fn func() error) {
	if s.err != nil {
		report(s.name+"."+name, fmt.Errorf("no usable response (see %s.response)", s.name))
		return
	}
	report(s.name+"."+name, fn())
}

// ---------------------------------------------------------------- transport

type peer struct {
	conn    *net.UDPConn
	upf     *net.UDPAddr
	seq     uint32
	timeout time.Duration
}

func dial(local string, upf *net.UDPAddr, timeout time.Duration) (*peer, error) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(local)})
	if err != nil {
		return nil, err
	}
	return &peer{conn: conn, upf: upf, seq: 0x100, timeout: timeout}, nil
}

func (p *peer) local() string { return p.conn.LocalAddr().(*net.UDPAddr).IP.String() }

func (p *peer) nextSeq() uint32 {
	p.seq++
	return p.seq
}

type header interface {
	MessageType() uint8
	Sequence() uint32
}

// exchange sends m and returns the first datagram from the UPF that is a response with m's
// sequence number. Heartbeat Requests from the UPF are answered; other requests are skipped.
func (p *peer) exchange(m message.Message, seq uint32, wantType uint8) (message.Message, []byte, error) {
	b := make([]byte, m.MarshalLen())
	if err := m.MarshalTo(b); err != nil {
		return nil, nil, fmt.Errorf("marshal: %v", err)
	}
	if _, err := p.conn.WriteToUDP(b, p.upf); err != nil {
		return nil, nil, fmt.Errorf("send: %v", err)
	}
	deadline := time.Now().Add(p.timeout)
	buf := make([]byte, 65535)
	for {
		if err := p.conn.SetReadDeadline(deadline); err != nil {
			return nil, nil, err
		}
		n, from, err := p.conn.ReadFromUDP(buf)
		if err != nil {
			return nil, nil, fmt.Errorf("no response within %v to request %x", p.timeout, b)
		}
		raw := append([]byte(nil), buf[:n]...)
		if !from.IP.Equal(p.upf.IP) || from.Port != p.upf.Port {
			return nil, raw, fmt.Errorf("response from %v, want %v", from, p.upf)
		}
		got, err := message.Parse(raw)
		if err != nil {
			return nil, raw, fmt.Errorf("go-pfcp cannot parse %x: %v", raw, err)
		}
		h := got.(header)
		if h.MessageType() == message.MsgTypeHeartbeatRequest {
			p.answerHeartbeat(got, from)
			continue
		}
		if h.Sequence() != seq && isRequest(h.MessageType()) {
			continue // a request of the UPF's own (session report...): not ours to check
		}
		if h.Sequence() != seq {
			return got, raw, fmt.Errorf("sequence number %d, want %d (response %x)", h.Sequence(), seq, raw)
		}
		if h.MessageType() != wantType {
			return got, raw, fmt.Errorf("message type %d, want %d (response %x)", h.MessageType(), wantType, raw)
		}
		return got, raw, nil
	}
}

// awaitRequest waits up to `within` for a request of type `want` from the UPF (heartbeats
// are answered meanwhile, anything else is skipped).
func (p *peer) awaitRequest(want uint8, within time.Duration) (message.Message, []byte, error) {
	deadline := time.Now().Add(within)
	buf := make([]byte, 65535)
	for {
		if err := p.conn.SetReadDeadline(deadline); err != nil {
			return nil, nil, err
		}
		n, from, err := p.conn.ReadFromUDP(buf)
		if err != nil {
			return nil, nil, fmt.Errorf("no request of type %d within %v", want, within)
		}
		raw := append([]byte(nil), buf[:n]...)
		got, err := message.Parse(raw)
		if err != nil {
			return nil, raw, fmt.Errorf("go-pfcp cannot parse %x: %v", raw, err)
		}
		switch got.(header).MessageType() {
		case message.MsgTypeHeartbeatRequest:
			p.answerHeartbeat(got, from)
		case want:
			return got, raw, nil
		}
	}
}

func isRequest(t uint8) bool {
	switch t {
	case 1, 3, 5, 7, 9, 12, 14, 50, 52, 54, 56:
		return true
	}
	return false
}

func (p *peer) answerHeartbeat(req message.Message, to *net.UDPAddr) {
	rsp := message.NewHeartbeatResponse(req.(header).Sequence(), ie.NewRecoveryTimeStamp(startTime))
	b := make([]byte, rsp.MarshalLen())
	if rsp.MarshalTo(b) == nil {
		_, _ = p.conn.WriteToUDP(b, to)
	}
}

// sessionSEID checks the header SEID of a session response.
func sessionSEID(m message.Message, want uint64) error {
	type seider interface{ SEID() uint64 }
	if got := m.(seider).SEID(); got != want {
		return fmt.Errorf("header SEID %#x, want %#x", got, want)
	}
	return nil
}

// ---------------------------------------------------------------- IE helpers

var startTime = time.Now().Truncate(time.Second)

func child(ies []*ie.IE, typ uint16) *ie.IE {
	for _, i := range ies {
		if i.Type == typ {
			return i
		}
	}
	return nil
}

func wantCause(i *ie.IE, want uint8) error {
	if i == nil {
		return errors.New("no Cause IE")
	}
	got, err := i.Cause()
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("cause %d, want %d", got, want)
	}
	return nil
}

func rts(i *ie.IE) (uint32, error) {
	if i == nil {
		return 0, errors.New("no Recovery Time Stamp IE")
	}
	if len(i.Payload) != 4 {
		return 0, fmt.Errorf("Recovery Time Stamp of %d octets", len(i.Payload))
	}
	return binary.BigEndian.Uint32(i.Payload), nil
}

func ipv4Is(got net.IP, want string) error {
	if !got.Equal(net.ParseIP(want)) {
		return fmt.Errorf("IPv4 %v, want %s", got, want)
	}
	return nil
}

// createdPDR is what a Created PDR IE says: PDR ID, Local F-TEID and UE IP Address.
type createdPDR struct {
	teid *ie.FTEIDFields
	ueIP *ie.UEIPAddressFields
}

func createdPDRs(list []*ie.IE) (map[uint16]createdPDR, error) {
	out := map[uint16]createdPDR{}
	for _, c := range list {
		kids, err := c.CreatedPDR()
		if err != nil {
			return nil, err
		}
		idIE := child(kids, ie.PDRID)
		if idIE == nil {
			return nil, errors.New("Created PDR without PDR ID")
		}
		id, err := idIE.PDRID()
		if err != nil {
			return nil, err
		}
		var e createdPDR
		if f := child(kids, ie.FTEID); f != nil {
			if e.teid, err = f.FTEID(); err != nil {
				return nil, fmt.Errorf("PDR %d: F-TEID: %v", id, err)
			}
		}
		if u := child(kids, ie.UEIPAddress); u != nil {
			if e.ueIP, err = u.UEIPAddress(); err != nil {
				return nil, fmt.Errorf("PDR %d: UE IP Address: %v", id, err)
			}
		}
		out[id] = e
	}
	return out, nil
}

func ueIPv4(c createdPDR, ok bool, id uint16) (net.IP, error) {
	if !ok {
		return nil, fmt.Errorf("no Created PDR for PDR %d", id)
	}
	if c.ueIP == nil || c.ueIP.Flags&0x02 == 0 || c.ueIP.IPv4Address == nil {
		return nil, fmt.Errorf("Created PDR %d has no UE IPv4 address (%+v)", id, c.ueIP)
	}
	_, pool, _ := net.ParseCIDR(uePool)
	if !pool.Contains(c.ueIP.IPv4Address) {
		return nil, fmt.Errorf("UE IPv4 %v not in %s", c.ueIP.IPv4Address, uePool)
	}
	return c.ueIP.IPv4Address, nil
}

// usageReport finds the Usage Report of URR `id` and checks its UR-SEQN and trigger.
func usageReport(reports []*ie.IE, id uint32, trigger string) error {
	for _, r := range reports {
		kids, err := r.UsageReport()
		if err != nil {
			return err
		}
		u := child(kids, ie.URRID)
		if u == nil {
			return errors.New("Usage Report without URR ID")
		}
		if got, err := u.URRID(); err != nil || got != id {
			continue
		}
		if s := child(kids, ie.URSEQN); s == nil {
			return errors.New("Usage Report without UR-SEQN")
		} else if _, err := s.URSEQN(); err != nil {
			return fmt.Errorf("UR-SEQN: %v", err)
		}
		t := child(kids, ie.UsageReportTrigger)
		if t == nil {
			return errors.New("Usage Report without Usage Report Trigger")
		}
		has := map[string]bool{"IMMER": t.HasIMMER(), "TERMR": t.HasTERMR(), "PERIO": t.HasPERIO()}[trigger]
		if !has {
			return fmt.Errorf("Usage Report Trigger %x lacks %s", t.Payload, trigger)
		}
		return nil
	}
	return fmt.Errorf("no Usage Report for URR %d among %d", id, len(reports))
}

// ---------------------------------------------------------------- the session's rules

func nodeID() *ie.IE { return ie.NewNodeID("", "", smfFQDN) }

// establishmentIEs: the SMF's usual PDU session: uplink PDRs 1 and 3 share CHOOSE ID 1, the
// downlink PDR 2 matches the UE address the UPF assigns; FAR 2 buffers until the gNB is known.
// farOfPDR1 lets the negative case point PDR 1 at a FAR that is not created.
func establishmentIEs(node *ie.IE, local string, seid uint64, farOfPDR1 uint32) []*ie.IE {
	ul := func(id uint16, prec uint32, qfi uint8) *ie.IE {
		far := uint32(1)
		if id == 1 {
			far = farOfPDR1
		}
		return ie.NewCreatePDR(
			ie.NewPDRID(id),
			ie.NewPrecedence(prec),
			ie.NewPDI(
				ie.NewSourceInterface(ie.SrcInterfaceAccess),
				ie.NewFTEID(0x0D, 0, nil, nil, 1), // CHID|CH|V4, CHOOSE ID 1
				ie.NewNetworkInstance("internet"),
				ie.NewUEIPAddress(0x10, "", "", 0, 0), // CHV4, S/D=0: source address
				ie.NewQFI(qfi),
			),
			ie.NewOuterHeaderRemoval(0, 0), // GTP-U/UDP/IPv4
			ie.NewFARID(far),
			ie.NewQERID(1),
			ie.NewURRID(1),
		)
	}
	dl := ie.NewCreatePDR(
		ie.NewPDRID(2),
		ie.NewPrecedence(200),
		ie.NewPDI(
			ie.NewSourceInterface(ie.SrcInterfaceCore),
			ie.NewNetworkInstance("internet"),
			ie.NewUEIPAddress(0x14, "", "", 0, 0), // CHV4, S/D=1: destination address
			ie.NewSDFFilter("permit out ip from any to assigned", "", "", "", 0),
		),
		ie.NewFARID(2),
		ie.NewQERID(1),
		ie.NewURRID(1),
	)
	return []*ie.IE{
		node,
		ie.NewFSEID(seid, net.ParseIP(local), nil),
		ul(1, 200, 9), dl, ul(3, 100, 5),
		ie.NewCreateFAR(
			ie.NewFARID(1),
			ie.NewApplyAction(0x02, 0x00), // FORW
			ie.NewForwardingParameters(
				ie.NewDestinationInterface(ie.DstInterfaceCore),
				ie.NewNetworkInstance("internet"),
			),
		),
		ie.NewCreateFAR(ie.NewFARID(2), ie.NewApplyAction(0x0C, 0x00)), // BUFF|NOCP
		ie.NewCreateQER(ie.NewQERID(1), ie.NewGateStatus(ie.GateStatusOpen, ie.GateStatusOpen),
			ie.NewMBR(100000, 200000)),
		ie.NewCreateURR(
			ie.NewURRID(1),
			ie.NewMeasurementMethod(0, 1, 0),    // VOLUM
			ie.NewReportingTriggers(0x03, 0x00), // PERIO|VOLTH
			ie.NewMeasurementPeriod(time.Hour),
			ie.NewVolumeThreshold(0x01, 1<<30, 0, 0), // TOVOL 1 GiB
		),
	}
}

// ---------------------------------------------------------------- the scenario

func main() {
	upfAddr := flag.String("upf", "", "the UPF's N4 address, IP:PORT")
	smfAddr := flag.String("smf", "127.0.0.2", "local IPv4 address of the associated SMF")
	other := flag.String("other", "127.0.0.6", "local IPv4 address of a never-associated peer")
	timeout := flag.Duration("timeout", 2*time.Second, "receive timeout per request")
	deadline := flag.Duration("deadline", 45*time.Second, "bound on the whole run")
	flag.Parse()
	upf, err := net.ResolveUDPAddr("udp4", *upfAddr)
	if err != nil || *upfAddr == "" {
		fmt.Fprintf(os.Stderr, "go-smf: -upf IP:PORT required (%v)\n", err)
		os.Exit(2)
	}
	time.AfterFunc(*deadline, func() {
		fmt.Printf("FAIL deadline: run exceeded %v\n", *deadline)
		os.Exit(1)
	})
	smf, err := dial(*smfAddr, upf, *timeout)
	if err != nil {
		fmt.Printf("FAIL setup: %v\n", err)
		os.Exit(1)
	}
	stranger, err := dial(*other, upf, *timeout)
	if err != nil {
		fmt.Printf("FAIL setup: %v\n", err)
		os.Exit(1)
	}
	run(smf, stranger, upf.IP.String())
	if failures > 0 {
		os.Exit(1)
	}
}

func run(smf, stranger *peer, upfIP string) {
	// 1. Association Setup.
	seq := smf.nextSeq()
	got, _, err := smf.exchange(message.NewAssociationSetupRequest(seq, nodeID(),
		ie.NewRecoveryTimeStamp(startTime), ie.NewCPFunctionFeatures(0x00)),
		seq, message.MsgTypeAssociationSetupResponse)
	s := &step{"assoc", err}
	report("assoc.response", err)
	var asr *message.AssociationSetupResponse
	if err == nil {
		asr = got.(*message.AssociationSetupResponse)
	}
	var upfRTS uint32
	s.check("cause", func() error { return wantCause(asr.Cause, 1) })
	s.check("node_id", func() error {
		if asr.NodeID == nil {
			return errors.New("no Node ID IE")
		}
		id, err := asr.NodeID.NodeID()
		if err != nil {
			return err
		}
		if asr.NodeID.Payload[0] != ie.NodeIDIPv4Address || id != upfIP {
			return fmt.Errorf("Node ID %x (%s), want IPv4 %s", asr.NodeID.Payload, id, upfIP)
		}
		return nil
	})
	s.check("recovery_time_stamp", func() (err error) {
		upfRTS, err = rts(asr.RecoveryTimeStamp)
		if err == nil && upfRTS == 0 {
			err = errors.New("Recovery Time Stamp 0")
		}
		return err
	})
	s.check("up_function_features", func() error {
		f := asr.UPFunctionFeatures
		if f == nil {
			return errors.New("no UP Function Features IE")
		}
		if !f.HasFTUP() || !f.HasUEIP() {
			return fmt.Errorf("UP Function Features %x: FTUP %v, UEIP %v", f.Payload, f.HasFTUP(), f.HasUEIP())
		}
		return nil
	})

	// 2. Heartbeat.
	seq = smf.nextSeq()
	got, _, err = smf.exchange(message.NewHeartbeatRequest(seq, ie.NewRecoveryTimeStamp(startTime), nil),
		seq, message.MsgTypeHeartbeatResponse)
	report("heartbeat.response", err)
	s = &step{"heartbeat", err}
	s.check("recovery_time_stamp", func() error {
		v, err := rts(got.(*message.HeartbeatResponse).RecoveryTimeStamp)
		if err == nil && v != upfRTS {
			err = fmt.Errorf("%d, association setup said %d", v, upfRTS)
		}
		return err
	})

	// 3. Session Establishment.
	seq = smf.nextSeq()
	got, _, err = smf.exchange(message.NewSessionEstablishmentRequest(0, 0, 0, seq, 0,
		establishmentIEs(nodeID(), smf.local(), cpSEID, 1)...),
		seq, message.MsgTypeSessionEstablishmentResponse)
	if err == nil {
		err = sessionSEID(got, cpSEID)
	}
	report("establish.response", err)
	s = &step{"establish", err}
	var ser *message.SessionEstablishmentResponse
	var pdrs map[uint16]createdPDR
	var pdrsErr error // go-pfcp could not read a Created PDR: every PDR check says so
	if err == nil {
		ser = got.(*message.SessionEstablishmentResponse)
		pdrs, pdrsErr = createdPDRs(ser.CreatedPDR)
	}
	upSEID := uint64(0)
	s.check("cause", func() error { return wantCause(ser.Cause, 1) })
	s.check("up_f_seid", func() error {
		if ser.UPFSEID == nil {
			return errors.New("no UP F-SEID IE")
		}
		f, err := ser.UPFSEID.FSEID()
		if err != nil {
			return err
		}
		if f.SEID == 0 || !f.HasIPv4() {
			return fmt.Errorf("UP F-SEID %x: SEID 0 or no IPv4", ser.UPFSEID.Payload)
		}
		upSEID = f.SEID
		return ipv4Is(f.IPv4Address, upfIP)
	})
	s.check("pdr1_f_teid", func() error {
		if pdrsErr != nil {
			return pdrsErr
		}
		c, ok := pdrs[1]
		if !ok || c.teid == nil {
			return errors.New("no Created PDR with a Local F-TEID for PDR 1")
		}
		if c.teid.TEID == 0 || !c.teid.HasIPv4() || c.teid.HasCh() {
			return fmt.Errorf("F-TEID %+v: TEID 0, no IPv4 or CH set", c.teid)
		}
		return ipv4Is(c.teid.IPv4Address, upfIP)
	})
	var ue net.IP
	s.check("pdr1_ue_ip", func() (err error) {
		if pdrsErr != nil {
			return pdrsErr
		}
		c, ok := pdrs[1]
		ue, err = ueIPv4(c, ok, 1)
		return err
	})
	s.check("pdr2_ue_ip", func() error {
		if pdrsErr != nil {
			return pdrsErr
		}
		c, ok := pdrs[2]
		ip, err := ueIPv4(c, ok, 2)
		if err == nil && !ip.Equal(ue) {
			err = fmt.Errorf("UE IPv4 %v, PDR 1 got %v", ip, ue)
		}
		return err
	})
	s.check("pdr3_same_chid", func() error {
		if pdrsErr != nil {
			return pdrsErr
		}
		c1, c3 := pdrs[1], pdrs[3]
		if c1.teid == nil || c3.teid == nil {
			return fmt.Errorf("Local F-TEIDs of PDRs 1 and 3: %+v, %+v", c1.teid, c3.teid)
		}
		if c1.teid.TEID != c3.teid.TEID || !c1.teid.IPv4Address.Equal(c3.teid.IPv4Address) {
			return fmt.Errorf("CHOOSE ID 1 gave TEID %#x to PDR 1, %#x to PDR 3", c1.teid.TEID, c3.teid.TEID)
		}
		c, ok := pdrs[3]
		ip, err := ueIPv4(c, ok, 3)
		if err == nil && !ip.Equal(ue) {
			err = fmt.Errorf("UE IPv4 %v, PDR 1 got %v", ip, ue)
		}
		return err
	})

	// 4. Session Modification: the gNB's tunnel is known, downlink FAR 2 forwards.
	modify := func(name string, ies ...*ie.IE) (*message.SessionModificationResponse, *step) {
		seq := smf.nextSeq()
		got, _, err := smf.exchange(message.NewSessionModificationRequest(0, 0, upSEID, seq, 0, ies...),
			seq, message.MsgTypeSessionModificationResponse)
		if err == nil {
			err = sessionSEID(got, cpSEID)
		}
		if err == nil && upSEID == 0 {
			err = errors.New("no UP SEID from the establishment")
		}
		report(name+".response", err)
		if err != nil {
			return nil, &step{name, err}
		}
		return got.(*message.SessionModificationResponse), &step{name, nil}
	}
	smr, s := modify("update_far", ie.NewUpdateFAR(
		ie.NewFARID(2),
		ie.NewApplyAction(0x02, 0x00), // FORW
		ie.NewUpdateForwardingParameters(
			ie.NewDestinationInterface(ie.DstInterfaceAccess),
			ie.NewOuterHeaderCreation(0x0100, gnbTEID, gnbAddr, "", 0, 0, 0), // GTP-U/UDP/IPv4
		),
	))
	s.check("cause", func() error { return wantCause(smr.Cause, 1) })

	// 5. Session Modification: Query URR 1.
	smr, s = modify("query_urr", ie.NewQueryURR(ie.NewURRID(1)))
	s.check("cause", func() error { return wantCause(smr.Cause, 1) })
	s.check("usage_report", func() error { return usageReport(smr.UsageReport, 1, "IMMER") })

	// 5b. A periodic URR of 1 s on PDR 1: the UPF's Session Report Request (TS 29.244
	// §7.5.8), read by go-pfcp, answered, and not sent again.
	smr, s = modify("periodic_urr",
		ie.NewCreateURR(
			ie.NewURRID(2),
			ie.NewMeasurementMethod(0, 1, 0),    // VOLUM
			ie.NewReportingTriggers(0x01, 0x00), // PERIO
			ie.NewMeasurementPeriod(time.Second),
		),
		ie.NewUpdatePDR(ie.NewPDRID(1), ie.NewURRID(1), ie.NewURRID(2)),
	)
	s.check("cause", func() error { return wantCause(smr.Cause, 1) })
	srr, raw, err := smf.awaitRequest(message.MsgTypeSessionReportRequest, 3*time.Second)
	if err == nil {
		err = sessionSEID(srr, cpSEID)
	}
	report("session_report.request", err)
	s = &step{"session_report", err}
	var rep *message.SessionReportRequest
	if err == nil {
		rep = srr.(*message.SessionReportRequest)
	}
	s.check("report_type", func() error {
		if rep.ReportType == nil {
			return errors.New("no Report Type IE")
		}
		if !rep.ReportType.HasUSAR() {
			return fmt.Errorf("Report Type %x without USAR", rep.ReportType.Payload)
		}
		return nil
	})
	s.check("usage_report", func() error { return usageReport(rep.UsageReport, 2, "PERIO") })
	s.check("answered", func() error {
		rsp := message.NewSessionReportResponse(0, 0, upSEID, srr.(header).Sequence(), 0,
			ie.NewCause(ie.CauseRequestAccepted))
		b := make([]byte, rsp.MarshalLen())
		if err := rsp.MarshalTo(b); err != nil {
			return err
		}
		if _, err := smf.conn.WriteToUDP(b, smf.upf); err != nil {
			return err
		}
		// Answered: the same request does not come back within T1 (3 s) and a margin; the
		// next periods' reports carry new sequence numbers.
		until := time.Now().Add(4 * time.Second)
		for time.Now().Before(until) {
			again, _, err := smf.awaitRequest(message.MsgTypeSessionReportRequest, time.Until(until))
			if err != nil {
				break
			}
			if again.(header).Sequence() == srr.(header).Sequence() {
				return fmt.Errorf("request %d retransmitted after its response (%x)", again.(header).Sequence(), raw)
			}
		}
		return nil
	})

	// 6a. Session Modification for an unknown SEID: TS 29.244 §7.2.2.4.2, cause 65 and SEID 0.
	seq = smf.nextSeq()
	got, _, err = smf.exchange(message.NewSessionModificationRequest(0, 0, unknownUP, seq, 0,
		ie.NewQueryURR(ie.NewURRID(1))), seq, message.MsgTypeSessionModificationResponse)
	if err == nil {
		err = sessionSEID(got, 0)
	}
	report("unknown_seid.response", err)
	s = &step{"unknown_seid", err}
	s.check("cause", func() error { return wantCause(got.(*message.SessionModificationResponse).Cause, 65) })

	// 6b. Session Establishment whose PDR 1 points at FAR 9, never created.
	seq = smf.nextSeq()
	got, _, err = smf.exchange(message.NewSessionEstablishmentRequest(0, 0, 0, seq, 0,
		establishmentIEs(nodeID(), smf.local(), cpSEIDBad, 9)...),
		seq, message.MsgTypeSessionEstablishmentResponse)
	if err == nil {
		err = sessionSEID(got, cpSEIDBad)
	}
	report("missing_far.response", err)
	s = &step{"missing_far", err}
	// TS 29.244 Table 8.2.1-1: 73 is "Rule creation/modification Failure" (69 is "Mandatory IE
	// incorrect"); §7.5.3.1: the Failed Rule ID names the rule.
	s.check("cause", func() error { return wantCause(got.(*message.SessionEstablishmentResponse).Cause, 73) })
	s.check("failed_rule_id", func() error {
		f := got.(*message.SessionEstablishmentResponse).FailedRuleID
		if f == nil {
			return errors.New("no Failed Rule ID IE")
		}
		typ, err := f.RuleIDType()
		if err != nil {
			return err
		}
		id, err := f.FailedRuleID()
		if err != nil {
			return err
		}
		if typ != ie.RuleIDTypePDR || id != 1 {
			return fmt.Errorf("Failed Rule ID %x: type %d id %d, want PDR 1", f.Payload, typ, id)
		}
		return nil
	})

	// 6c. Session Establishment from a node that never set up an association.
	seq = stranger.nextSeq()
	got, _, err = stranger.exchange(message.NewSessionEstablishmentRequest(0, 0, 0, seq, 0,
		establishmentIEs(ie.NewNodeID(stranger.local(), "", ""), stranger.local(), cpSEIDOff, 1)...),
		seq, message.MsgTypeSessionEstablishmentResponse)
	report("not_associated.response", err)
	s = &step{"not_associated", err}
	s.check("cause", func() error { return wantCause(got.(*message.SessionEstablishmentResponse).Cause, 72) })

	// 7. Session Deletion.
	seq = smf.nextSeq()
	got, _, err = smf.exchange(message.NewSessionDeletionRequest(0, 0, upSEID, seq, 0),
		seq, message.MsgTypeSessionDeletionResponse)
	if err == nil {
		err = sessionSEID(got, cpSEID)
	}
	report("delete.response", err)
	s = &step{"delete", err}
	s.check("cause", func() error { return wantCause(got.(*message.SessionDeletionResponse).Cause, 1) })
	s.check("usage_report", func() error {
		return usageReport(got.(*message.SessionDeletionResponse).UsageReport, 1, "TERMR")
	})

	// 8. Association Release.
	seq = smf.nextSeq()
	got, _, err = smf.exchange(message.NewAssociationReleaseRequest(seq, nodeID()),
		seq, message.MsgTypeAssociationReleaseResponse)
	report("release.response", err)
	s = &step{"release", err}
	s.check("cause", func() error { return wantCause(got.(*message.AssociationReleaseResponse).Cause, 1) })
}
