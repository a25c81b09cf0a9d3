// Views over wire headers (IBTA 9.2–9.5, RoCEv2 Annex A17). A view wraps a
// byte pointer and reads or writes one field at a time through big-endian
// helpers: no bitfields, no packed structs, no alignment assumptions.
// `XxxView` reads (const bytes); `XxxWriter` also writes. Bounds are the
// parser's job: a view is only made over bytes the parser has checked.
#ifndef DROCE_LIB_WIRE_HEADERS_H_
#define DROCE_LIB_WIRE_HEADERS_H_

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "wire/byte_order.h"

namespace droce::wire {

inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeIpv6 = 0x86DD;
inline constexpr uint16_t kEtherTypeVlan = 0x8100;
inline constexpr uint16_t kEtherTypeArp = 0x0806;
inline constexpr uint8_t kIpProtoUdp = 17;
inline constexpr uint16_t kRoceV2Port = 4791;
inline constexpr uint32_t kEthBytes = 14;
inline constexpr uint32_t kVlanTagBytes = 4;
inline constexpr uint32_t kIpv4MinBytes = 20;
inline constexpr uint32_t kIpv6Bytes = 40;
inline constexpr uint32_t kUdpBytes = 8;

// ECN codepoints (RFC 3168) in the low two bits of TOS / traffic class.
inline constexpr uint8_t kEcnNotEct = 0, kEcnEct1 = 1, kEcnEct0 = 2, kEcnCe = 3;

template <typename B>
class HeaderView {
 public:
  static constexpr bool kWritable = !std::is_const_v<B>;
  explicit HeaderView(B* p) : p_(p) {}
  B* data() const { return p_; }

 protected:
  B* p_;
};

template <typename B>
class EthT : public HeaderView<B> {
  using HeaderView<B>::p_;

 public:
  using HeaderView<B>::HeaderView;
  const uint8_t* dst_mac() const { return p_; }
  const uint8_t* src_mac() const { return p_ + 6; }
  uint16_t ether_type() const { return LoadBe16(p_ + 12); }
  void set_dst_mac(const uint8_t* m) requires HeaderView<B>::kWritable { std::memcpy(p_, m, 6); }
  void set_src_mac(const uint8_t* m) requires HeaderView<B>::kWritable { std::memcpy(p_ + 6, m, 6); }
  void set_ether_type(uint16_t v) requires HeaderView<B>::kWritable { StoreBe16(p_ + 12, v); }
};

// 802.1Q tag body, following the 0x8100 TPID: TCI then the inner EtherType.
template <typename B>
class VlanT : public HeaderView<B> {
  using HeaderView<B>::p_;

 public:
  using HeaderView<B>::HeaderView;
  uint16_t tci() const { return LoadBe16(p_); }
  uint8_t pcp() const { return p_[0] >> 5; }
  uint16_t vid() const { return tci() & 0x0FFF; }
  uint16_t inner_ether_type() const { return LoadBe16(p_ + 2); }
  void set_tci(uint16_t v) requires HeaderView<B>::kWritable { StoreBe16(p_, v); }
  void set_inner_ether_type(uint16_t v) requires HeaderView<B>::kWritable { StoreBe16(p_ + 2, v); }
};

template <typename B>
class Ipv4T : public HeaderView<B> {
  using HeaderView<B>::p_;

 public:
  using HeaderView<B>::HeaderView;
  uint8_t version() const { return p_[0] >> 4; }
  uint32_t header_bytes() const { return (p_[0] & 0x0F) * 4u; }
  uint8_t tos() const { return p_[1]; }
  uint8_t dscp() const { return p_[1] >> 2; }
  uint8_t ecn() const { return p_[1] & 3; }
  uint16_t total_length() const { return LoadBe16(p_ + 2); }
  uint16_t id() const { return LoadBe16(p_ + 4); }
  uint16_t flags_fragment() const { return LoadBe16(p_ + 6); }
  bool is_fragment() const { return (flags_fragment() & 0x3FFF) != 0; }  // MF or offset
  uint8_t ttl() const { return p_[8]; }
  uint8_t protocol() const { return p_[9]; }
  uint16_t checksum() const { return LoadBe16(p_ + 10); }
  uint32_t src() const { return LoadBe32(p_ + 12); }
  uint32_t dst() const { return LoadBe32(p_ + 16); }
  void set_version_ihl(uint8_t v) requires HeaderView<B>::kWritable { p_[0] = v; }
  void set_tos(uint8_t v) requires HeaderView<B>::kWritable { p_[1] = v; }
  void set_ecn(uint8_t e) requires HeaderView<B>::kWritable { p_[1] = (p_[1] & 0xFC) | (e & 3); }
  void set_total_length(uint16_t v) requires HeaderView<B>::kWritable { StoreBe16(p_ + 2, v); }
  void set_id(uint16_t v) requires HeaderView<B>::kWritable { StoreBe16(p_ + 4, v); }
  void set_flags_fragment(uint16_t v) requires HeaderView<B>::kWritable { StoreBe16(p_ + 6, v); }
  void set_ttl(uint8_t v) requires HeaderView<B>::kWritable { p_[8] = v; }
  void set_protocol(uint8_t v) requires HeaderView<B>::kWritable { p_[9] = v; }
  void set_checksum(uint16_t v) requires HeaderView<B>::kWritable { StoreBe16(p_ + 10, v); }
  void set_src(uint32_t v) requires HeaderView<B>::kWritable { StoreBe32(p_ + 12, v); }
  void set_dst(uint32_t v) requires HeaderView<B>::kWritable { StoreBe32(p_ + 16, v); }
};

template <typename B>
class Ipv6T : public HeaderView<B> {
  using HeaderView<B>::p_;

 public:
  using HeaderView<B>::HeaderView;
  uint8_t version() const { return p_[0] >> 4; }
  uint8_t traffic_class() const { return static_cast<uint8_t>((LoadBe32(p_) >> 20) & 0xFF); }
  uint8_t ecn() const { return traffic_class() & 3; }
  uint32_t flow_label() const { return LoadBe32(p_) & 0xFFFFF; }
  uint16_t payload_length() const { return LoadBe16(p_ + 4); }
  uint8_t next_header() const { return p_[6]; }
  uint8_t hop_limit() const { return p_[7]; }
  const uint8_t* src() const { return p_ + 8; }
  const uint8_t* dst() const { return p_ + 24; }
  void set_version_class_flow(uint8_t tclass, uint32_t flow) requires HeaderView<B>::kWritable {
    StoreBe32(p_, (6u << 28) | (uint32_t{tclass} << 20) | (flow & 0xFFFFF));
  }
  void set_ecn(uint8_t e) requires HeaderView<B>::kWritable {
    set_version_class_flow(static_cast<uint8_t>((traffic_class() & 0xFC) | (e & 3)), flow_label());
  }
  void set_payload_length(uint16_t v) requires HeaderView<B>::kWritable { StoreBe16(p_ + 4, v); }
  void set_next_header(uint8_t v) requires HeaderView<B>::kWritable { p_[6] = v; }
  void set_hop_limit(uint8_t v) requires HeaderView<B>::kWritable { p_[7] = v; }
  void set_src(const uint8_t* a) requires HeaderView<B>::kWritable { std::memcpy(p_ + 8, a, 16); }
  void set_dst(const uint8_t* a) requires HeaderView<B>::kWritable { std::memcpy(p_ + 24, a, 16); }
};

template <typename B>
class UdpT : public HeaderView<B> {
  using HeaderView<B>::p_;

 public:
  using HeaderView<B>::HeaderView;
  uint16_t src_port() const { return LoadBe16(p_); }
  uint16_t dst_port() const { return LoadBe16(p_ + 2); }
  uint16_t length() const { return LoadBe16(p_ + 4); }
  uint16_t checksum() const { return LoadBe16(p_ + 6); }
  void set_src_port(uint16_t v) requires HeaderView<B>::kWritable { StoreBe16(p_, v); }
  void set_dst_port(uint16_t v) requires HeaderView<B>::kWritable { StoreBe16(p_ + 2, v); }
  void set_length(uint16_t v) requires HeaderView<B>::kWritable { StoreBe16(p_ + 4, v); }
  void set_checksum(uint16_t v) requires HeaderView<B>::kWritable { StoreBe16(p_ + 6, v); }
};

// Base Transport Header (IBTA 9.2). Byte 4 holds FECN/BECN in RoCEv2 and is
// masked out of the ICRC entirely (resv8a); byte 8's low 7 bits are reserved.
template <typename B>
class BthT : public HeaderView<B> {
  using HeaderView<B>::p_;

 public:
  using HeaderView<B>::HeaderView;
  uint8_t opcode() const { return p_[0]; }
  bool solicited() const { return p_[1] & 0x80; }
  bool mig_req() const { return p_[1] & 0x40; }
  uint8_t pad_count() const { return (p_[1] >> 4) & 3; }
  uint8_t tver() const { return p_[1] & 0x0F; }
  uint16_t pkey() const { return LoadBe16(p_ + 2); }
  bool fecn() const { return p_[4] & 0x80; }
  bool becn() const { return p_[4] & 0x40; }
  uint8_t resv6() const { return p_[4] & 0x3F; }
  uint32_t dest_qp() const { return LoadBe24(p_ + 5); }
  bool ack_req() const { return p_[8] & 0x80; }
  uint8_t resv7() const { return p_[8] & 0x7F; }
  uint32_t psn() const { return LoadBe24(p_ + 9); }

  void set_opcode(uint8_t v) requires HeaderView<B>::kWritable { p_[0] = v; }
  void set_flags(bool se, bool mig, uint8_t pad, uint8_t tver) requires HeaderView<B>::kWritable {
    p_[1] = static_cast<uint8_t>((se << 7) | (mig << 6) | ((pad & 3) << 4) | (tver & 0x0F));
  }
  void set_pad_count(uint8_t pad) requires HeaderView<B>::kWritable {
    p_[1] = static_cast<uint8_t>((p_[1] & 0xCF) | ((pad & 3) << 4));
  }
  void set_pkey(uint16_t v) requires HeaderView<B>::kWritable { StoreBe16(p_ + 2, v); }
  void set_ecn_bits(bool fecn, bool becn, uint8_t resv6 = 0) requires HeaderView<B>::kWritable {
    p_[4] = static_cast<uint8_t>((fecn << 7) | (becn << 6) | (resv6 & 0x3F));
  }
  void set_dest_qp(uint32_t v) requires HeaderView<B>::kWritable { StoreBe24(p_ + 5, v); }
  void set_ack_req(bool a, uint8_t resv7 = 0) requires HeaderView<B>::kWritable {
    p_[8] = static_cast<uint8_t>((a << 7) | (resv7 & 0x7F));
  }
  void set_psn(uint32_t v) requires HeaderView<B>::kWritable { StoreBe24(p_ + 9, v); }
};

// RDMA Extended Transport Header (IBTA 9.3.3).
template <typename B>
class RethT : public HeaderView<B> {
 protected:  // SrEthT extends it
  using HeaderView<B>::p_;

 public:
  using HeaderView<B>::HeaderView;
  uint64_t va() const { return LoadBe64(p_); }
  uint32_t rkey() const { return LoadBe32(p_ + 8); }
  uint32_t dma_length() const { return LoadBe32(p_ + 12); }
  void set_va(uint64_t v) requires HeaderView<B>::kWritable { StoreBe64(p_, v); }
  void set_rkey(uint32_t v) requires HeaderView<B>::kWritable { StoreBe32(p_ + 8, v); }
  void set_dma_length(uint32_t v) requires HeaderView<B>::kWritable { StoreBe32(p_ + 12, v); }
};

// ACK Extended Transport Header (IBTA 9.3.5): syndrome and 24-bit MSN.
template <typename B>
class AethT : public HeaderView<B> {
  using HeaderView<B>::p_;

 public:
  using HeaderView<B>::HeaderView;
  uint8_t syndrome() const { return p_[0]; }
  uint32_t msn() const { return LoadBe24(p_ + 1); }
  void set_syndrome(uint8_t v) requires HeaderView<B>::kWritable { p_[0] = v; }
  void set_msn(uint32_t v) requires HeaderView<B>::kWritable { StoreBe24(p_ + 1, v); }
};

// Atomic Extended Transport Header (IBTA 9.3.4).
template <typename B>
class AtomicEthT : public HeaderView<B> {
  using HeaderView<B>::p_;

 public:
  using HeaderView<B>::HeaderView;
  uint64_t va() const { return LoadBe64(p_); }
  uint32_t rkey() const { return LoadBe32(p_ + 8); }
  uint64_t swap_add() const { return LoadBe64(p_ + 12); }
  uint64_t compare() const { return LoadBe64(p_ + 20); }
  void set_va(uint64_t v) requires HeaderView<B>::kWritable { StoreBe64(p_, v); }
  void set_rkey(uint32_t v) requires HeaderView<B>::kWritable { StoreBe32(p_ + 8, v); }
  void set_swap_add(uint64_t v) requires HeaderView<B>::kWritable { StoreBe64(p_ + 12, v); }
  void set_compare(uint64_t v) requires HeaderView<B>::kWritable { StoreBe64(p_ + 20, v); }
};

// Atomic ACK Extended Transport Header (IBTA 9.5.3): the original value.
template <typename B>
class AtomicAckEthT : public HeaderView<B> {
  using HeaderView<B>::p_;

 public:
  using HeaderView<B>::HeaderView;
  uint64_t original() const { return LoadBe64(p_); }
  void set_original(uint64_t v) requires HeaderView<B>::kWritable { StoreBe64(p_, v); }
};

// Datagram Extended Transport Header (IBTA 9.3.2).
template <typename B>
class DethT : public HeaderView<B> {
  using HeaderView<B>::p_;

 public:
  using HeaderView<B>::HeaderView;
  uint32_t qkey() const { return LoadBe32(p_); }
  uint8_t resv8() const { return p_[4]; }
  uint32_t src_qp() const { return LoadBe24(p_ + 5); }
  void set_qkey(uint32_t v) requires HeaderView<B>::kWritable { StoreBe32(p_, v); }
  void set_src_qp(uint32_t v, uint8_t resv = 0) requires HeaderView<B>::kWritable {
    p_[4] = resv;
    StoreBe24(p_ + 5, v);
  }
};

// A single big-endian 32-bit field: ImmDt (9.3.6) or IETH's R_Key (9.3.7).
// value() is the number the four bytes spell big-endian (as Wireshark shows
// it); wire_order() is the four bytes themselves, unswapped, as verbs holds
// immediate data (a __be32: ibv_send_wr.imm_data, ibv_wc.imm_data).
template <typename B>
class Be32FieldT : public HeaderView<B> {
  using HeaderView<B>::p_;

 public:
  using HeaderView<B>::HeaderView;
  uint32_t value() const { return LoadBe32(p_); }
  void set_value(uint32_t v) requires HeaderView<B>::kWritable { StoreBe32(p_, v); }
  uint32_t wire_order() const {
    uint32_t v;
    std::memcpy(&v, p_, sizeof v);
    return v;
  }
  void set_wire_order(uint32_t v) requires HeaderView<B>::kWritable { std::memcpy(p_, &v, sizeof v); }
};

// droce selective repeat (doc/transport.md "Selective repeat"), after the
// BTH of an SR SEND/WRITE packet: where its payload goes, so that a packet
// can be placed whatever arrived before it. WRITE: the RETH's VA, R_Key and
// DMA length; SEND: dma_length 0 until LAST, VA and R_Key 0. Both: the
// payload's byte offset in the message, and the message's receive sequence
// number (which receive WQE it consumes, counted from 0 at the connection;
// SENDs and WRITE with immediate).
template <typename B>
class SrEthT : public RethT<B> {  // its first 16 bytes are a RETH's (VA, R_Key, DMA length)
  using RethT<B>::p_;

 public:
  using RethT<B>::RethT;
  uint32_t offset() const { return LoadBe32(p_ + 16); }
  uint32_t recv_seq() const { return LoadBe32(p_ + 20); }
  void set_offset(uint32_t v) requires HeaderView<B>::kWritable { StoreBe32(p_ + 16, v); }
  void set_recv_seq(uint32_t v) requires HeaderView<B>::kWritable { StoreBe32(p_ + 20, v); }
};

// droce selective repeat: the SACK's extended header, after its AETH. The
// first PSN the responder still misses (its expected PSN; the BTH PSN is the
// one before it, the cumulative acknowledgement) and which of the 1024 PSNs
// after it arrived: bit b of 64-bit word w (big endian, LSB = bit 0) stands
// for PSN base + 1 + 64w + b. 1024 covers the responder's whole window
// (transport's kSrWindow), so every packet sent past a hole can be SACKed
// while the hole is repaired and stops counting against the in-flight cap.
inline constexpr uint32_t kSackBits = 1024;
template <typename B>
class SackEthT : public HeaderView<B> {
  using HeaderView<B>::p_;

 public:
  using HeaderView<B>::HeaderView;
  uint32_t base_psn() const { return LoadBe32(p_) & 0xFFFFFF; }
  uint64_t word(uint32_t w) const { return LoadBe64(p_ + 4 + 8 * w); }
  bool received(uint32_t i) const {  // PSN base + 1 + i
    return i < kSackBits && ((word(i / 64) >> (i % 64)) & 1) != 0;
  }
  void set_base_psn(uint32_t v) requires HeaderView<B>::kWritable { StoreBe32(p_, v & 0xFFFFFF); }
  void set_word(uint32_t w, uint64_t v) requires HeaderView<B>::kWritable { StoreBe64(p_ + 4 + 8 * w, v); }
  bool any() const {  // some PSN past the first missing one arrived
    for (uint32_t w = 0; w < kSackBits / 64; ++w) {
      if (word(w) != 0) return true;
    }
    return false;
  }
};

using EthView = EthT<const uint8_t>;
using EthWriter = EthT<uint8_t>;
using VlanView = VlanT<const uint8_t>;
using VlanWriter = VlanT<uint8_t>;
using Ipv4View = Ipv4T<const uint8_t>;
using Ipv4Writer = Ipv4T<uint8_t>;
using Ipv6View = Ipv6T<const uint8_t>;
using Ipv6Writer = Ipv6T<uint8_t>;
using UdpView = UdpT<const uint8_t>;
using UdpWriter = UdpT<uint8_t>;
using BthView = BthT<const uint8_t>;
using BthWriter = BthT<uint8_t>;
using RethView = RethT<const uint8_t>;
using RethWriter = RethT<uint8_t>;
using SrEthView = SrEthT<const uint8_t>;
using SrEthWriter = SrEthT<uint8_t>;
using SackEthView = SackEthT<const uint8_t>;
using SackEthWriter = SackEthT<uint8_t>;
using AethView = AethT<const uint8_t>;
using AethWriter = AethT<uint8_t>;
using AtomicEthView = AtomicEthT<const uint8_t>;
using AtomicEthWriter = AtomicEthT<uint8_t>;
using AtomicAckEthView = AtomicAckEthT<const uint8_t>;
using AtomicAckEthWriter = AtomicAckEthT<uint8_t>;
using DethView = DethT<const uint8_t>;
using DethWriter = DethT<uint8_t>;
using ImmDtView = Be32FieldT<const uint8_t>;
using ImmDtWriter = Be32FieldT<uint8_t>;
using IethView = Be32FieldT<const uint8_t>;
using IethWriter = Be32FieldT<uint8_t>;

// AETH syndrome encoding (IBTA 9.7.5.2.7 / Table 44).
enum class AethType : uint8_t { kAck = 0, kRnrNak = 1, kReserved = 2, kNak = 3 };
enum NakCode : uint8_t {
  kNakPsnSequenceError = 0,
  kNakInvalidRequest = 1,
  kNakRemoteAccessError = 2,
  kNakRemoteOperationalError = 3,
  kNakInvalidRdRequest = 4,
};
inline constexpr uint8_t kAethCreditsInvalid = 0x1F;  // "no credit information"

constexpr AethType SyndromeType(uint8_t syndrome) {
  return static_cast<AethType>((syndrome >> 5) & 3);
}
constexpr uint8_t SyndromeValue(uint8_t syndrome) { return syndrome & 0x1F; }
constexpr uint8_t MakeSyndrome(AethType t, uint8_t value) {
  return static_cast<uint8_t>((static_cast<uint8_t>(t) << 5) | (value & 0x1F));
}

// Where a frame's IP header starts and what it carries.
struct L3Info {
  uint16_t ether_type = 0;  // after an 802.1Q tag, if any
  uint32_t l3_offset = 0;
};

inline L3Info ReadL3(const uint8_t* f, uint32_t len) {
  L3Info r;
  if (len < kEthBytes) return r;
  uint32_t off = kEthBytes;
  uint16_t type = LoadBe16(f + 12);
  if (type == kEtherTypeVlan) {
    if (len < off + kVlanTagBytes) return r;
    type = LoadBe16(f + off + 2);
    off += kVlanTagBytes;
  }
  r.ether_type = type;
  r.l3_offset = off;
  return r;
}

}  // namespace droce::wire

#endif  // DROCE_LIB_WIRE_HEADERS_H_
