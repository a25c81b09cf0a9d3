// A small libpcap wrapper: read a capture packet by packet, or dump frames to
// a new capture with the Ethernet link type. The only place droce touches
// libpcap; lib/ never does. Errors (unreadable file, wrong link type, write
// failure) come back as absl::Status, never as exits or prints.
#ifndef DROCE_DRIVERS_PCAP_PCAP_IO_H_
#define DROCE_DRIVERS_PCAP_PCAP_IO_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace droce::pcapio {

inline constexpr int kLinkTypeEthernet = 1;  // LINKTYPE_ETHERNET / DLT_EN10MB

// One captured packet. `data` holds `caplen` bytes and stays valid until the
// next call to PcapReader::Next. `len` is the length on the wire; a packet
// cut by the capture's snaplen has caplen < len.
struct PcapPacket {
  const uint8_t* data = nullptr;
  uint32_t caplen = 0;
  uint32_t len = 0;
  int64_t ts_ns = 0;  // nanoseconds since the Unix epoch

  bool truncated() const { return caplen < len; }
  std::span<const uint8_t> bytes() const { return {data, caplen}; }
};

class PcapReader {
 public:
  // Opens a pcap (or pcapng) file. Fails with NotFound/InvalidArgument and
  // libpcap's message if the file cannot be read as a capture.
  static absl::StatusOr<PcapReader> Open(const std::string& path);

  PcapReader(PcapReader&&) noexcept;
  PcapReader& operator=(PcapReader&&) noexcept;
  ~PcapReader();

  // The next packet, or nullopt at the end of the file or on a read error;
  // status() tells the two apart.
  std::optional<PcapPacket> Next();
  const absl::Status& status() const { return status_; }

  int link_type() const;
  uint32_t snaplen() const;
  const std::string& path() const { return path_; }

 private:
  struct Handle;
  PcapReader(std::string path, std::unique_ptr<Handle> h);
  std::string path_;
  std::unique_ptr<Handle> h_;
  absl::Status status_;
};

class PcapWriter {
 public:
  // Creates (truncates) `path` as a pcap file with the Ethernet link type and
  // microsecond timestamps.
  static absl::StatusOr<PcapWriter> Create(const std::string& path, uint32_t snaplen = 65535);

  PcapWriter(PcapWriter&&) noexcept;
  PcapWriter& operator=(PcapWriter&&) noexcept;
  ~PcapWriter();  // flushes and closes

  // Appends one frame; frames longer than the snaplen are cut to it (the
  // original length is kept in the record, as tcpdump does).
  absl::Status Write(std::span<const uint8_t> frame, int64_t ts_ns);
  absl::Status Flush();
  absl::Status Close();
  uint64_t packets_written() const { return packets_; }

 private:
  struct Handle;
  PcapWriter(std::string path, std::unique_ptr<Handle> h, uint32_t snaplen);
  std::string path_;
  std::unique_ptr<Handle> h_;
  uint32_t snaplen_ = 0;
  uint64_t packets_ = 0;
};

// A packet copied out of a capture (for tests and small tools).
struct OwnedPacket {
  std::vector<uint8_t> data;  // caplen bytes
  uint32_t len = 0;           // wire length
  int64_t ts_ns = 0;
  bool truncated() const { return data.size() < len; }
};

// Reads a whole capture into memory; fails if it cannot be opened, is not
// Ethernet, or a read error occurs part way.
absl::StatusOr<std::vector<OwnedPacket>> ReadAll(const std::string& path);

}  // namespace droce::pcapio

#endif  // DROCE_DRIVERS_PCAP_PCAP_IO_H_
