-- pulsar.lua: a Pulsar framer for tshark / Wireshark 4.0, the benchmark's yardstick.
--
-- Input: TCP streams on port 6650 (the Pulsar broker port).
-- Output: one "pulsar" tree item per frame (total size, command size, payload size) with
-- the command handed to Wireshark's built-in protobuf dissector as
-- pulsar.proto.BaseCommand, so every command field is decoded from proto/pulsar_api.proto.
-- Rule: this is "what users do today" without a native dissector: frame on the 4-byte
-- big-endian totalSize with dissect_tcp_pdus (frames may span segments, several frames may
-- share one), then the 4-byte commandSize and the BaseCommand bytes. The payload section of
-- SEND/MESSAGE (checksum, MessageMetadata, payload) is shown as bytes, not decoded.
--
-- Use (the benchmark passes the same options):
--   tshark -X lua_script:benchmarks/pulsar.lua \
--     -o 'uat:protobuf_search_paths:"/work/main/proto","TRUE"' \
--     -o protobuf.preload_protos:TRUE -o protobuf.pbf_as_hf:TRUE \
--     -r capture.pcap -Y pulsar -T fields -e pbf.pulsar.proto.BaseCommand.type

local pulsar = Proto("pulsar", "Apache Pulsar binary protocol (Lua framer)")

local f_total = ProtoField.uint32("pulsar.total_size", "Total size", base.DEC)
local f_cmd_size = ProtoField.uint32("pulsar.command_size", "Command size", base.DEC)
local f_rest = ProtoField.bytes("pulsar.payload_section", "Payload section")
pulsar.fields = { f_total, f_cmd_size, f_rest }

local protobuf = Dissector.get("protobuf")
local BASE_COMMAND = "message,pulsar.proto.BaseCommand"
local HEADER = 4 -- totalSize: u32 big-endian, not counting itself

-- Length of the frame starting at `offset`: the 4-byte size field plus what it counts.
local function frame_length(tvb, pinfo, offset)
    return tvb(offset, HEADER):uint() + HEADER
end

-- One whole frame.
local function dissect_frame(tvb, pinfo, tree)
    local total = tvb(0, 4):uint()
    local item = tree:add(pulsar, tvb(), "Pulsar frame")
    item:add(f_total, tvb(0, 4))
    pinfo.cols.protocol = "Pulsar"
    if tvb:len() < 8 then
        return tvb:len()
    end
    local cmd_size = tvb(4, 4):uint()
    item:add(f_cmd_size, tvb(4, 4))
    if cmd_size > 0 and 8 + cmd_size <= tvb:len() then
        pinfo.private["pb_msg_type"] = BASE_COMMAND
        pcall(Dissector.call, protobuf, tvb(8, cmd_size):tvb(), pinfo, item)
    end
    local rest = total + HEADER - 8 - cmd_size
    if rest > 0 and 8 + cmd_size + rest <= tvb:len() then
        item:add(f_rest, tvb(8 + cmd_size, rest))
    end
    return tvb:len()
end

function pulsar.dissector(tvb, pinfo, tree)
    dissect_tcp_pdus(tvb, tree, HEADER, frame_length, dissect_frame, true)
    return tvb:len()
end

DissectorTable.get("tcp.port"):add(6650, pulsar)
