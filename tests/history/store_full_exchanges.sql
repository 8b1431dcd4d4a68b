-- a history store written by kedi before exchanges were stored linear (full exchanges):
-- `kedi run` of tests/history/test_store_exchanges.py::OLD_PROGRAM, offline model, session "old"
BEGIN TRANSACTION;
CREATE TABLE kedi_schema (component TEXT PRIMARY KEY, version BIGINT NOT NULL);
INSERT INTO "kedi_schema" VALUES('kedi',1);
CREATE TABLE runs (
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            run_no BIGINT NOT NULL,
            program TEXT NOT NULL DEFAULT '',
            started DOUBLE PRECISION NOT NULL,
            finished DOUBLE PRECISION,
            status TEXT NOT NULL,
            failure TEXT,
            PRIMARY KEY (session_id, run_no)
        );
INSERT INTO "runs" VALUES('01a234bf-c385-7394-b327-494546f542a9',1,'old.kedi',1.79618131239060306548e+09,1.79618131242652153975e+09,'ok',NULL);
CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            name TEXT UNIQUE,
            program TEXT NOT NULL DEFAULT '',
            model TEXT NOT NULL DEFAULT '',
            parent TEXT,
            created DOUBLE PRECISION NOT NULL,
            updated DOUBLE PRECISION NOT NULL,
            turns BIGINT NOT NULL DEFAULT 0
        );
INSERT INTO "sessions" VALUES('01a234bf-c385-7394-b327-494546f542a9','old','old.kedi','offline',NULL,1.79618131239003252976e+09,1.79618131242652153975e+09,3);
CREATE TABLE turns (
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            seq BIGINT NOT NULL,
            run_no BIGINT NOT NULL,
            lane TEXT NOT NULL,
            history BIGINT NOT NULL,
            epoch BIGINT NOT NULL,
            run_id TEXT NOT NULL DEFAULT '',
            origin TEXT NOT NULL DEFAULT '',
            request TEXT NOT NULL,
            messages TEXT NOT NULL,
            rewritten TEXT,
            value TEXT,
            usage TEXT NOT NULL,
            exchanges TEXT NOT NULL,
            created DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (session_id, seq)
        );
INSERT INTO "turns" VALUES('01a234bf-c385-7394-b327-494546f542a9',1,1,'{"adapter":"offline","format":"portable","mcp":"","model":"offline","settings":"44136fa355b3678a","tools":""}',1,0,'01a234bf-c387-7dad-97ad-777b0306396a','old.kedi:3','{"lane":"offline/offline#43262c02","instructions":"Be brief.","prompt":"Name a city [city].","history":{"messages":0,"digest":""},"output_schema":{"properties":{"city":{"title":"City","type":"string"}},"required":["city"],"title":"KediOutputs","type":"object"},"tools":[],"tool_contract":"","settings":{},"origin":"old.kedi:3"}','[{"role":"user","content":"Name a city [city].","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"},{"role":"assistant","content":"{\"city\":\"city\"}","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"}]',NULL,'{"city":"city"}','{"input_tokens":12,"output_tokens":6,"requests":1,"tool_calls":0}','[{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Name a city [city].","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"}],"response":{"role":"assistant","content":"{\"city\":\"city\"}","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"},"output_schema":{"properties":{"city":{"title":"City","type":"string"}},"required":["city"],"title":"KediOutputs","type":"object"},"tools":[],"call_id":"01a234bf-c393-73c8-9a83-6f72ea0c441b"}]',1.79618131242113423344e+09);
INSERT INTO "turns" VALUES('01a234bf-c385-7394-b327-494546f542a9',2,1,'{"adapter":"offline","format":"portable","mcp":"","model":"offline","settings":"44136fa355b3678a","tools":""}',1,0,'01a234bf-c387-7dad-97ad-777b0306396a','old.kedi:4','{"lane":"offline/offline#43262c02","instructions":"Be brief.","prompt":"Name a river near city [river].","history":{"messages":2,"digest":"f6836f73d43cc8fe"},"output_schema":{"properties":{"river":{"title":"River","type":"string"}},"required":["river"],"title":"KediOutputs","type":"object"},"tools":[],"tool_contract":"","settings":{},"origin":"old.kedi:4"}','[{"role":"user","content":"Name a river near city [river].","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"},{"role":"assistant","content":"{\"river\":\"river\"}","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"}]',NULL,'{"river":"river"}','{"input_tokens":28,"output_tokens":7,"requests":1,"tool_calls":0}','[{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Name a city [city].","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"},{"role":"assistant","content":"{\"city\":\"city\"}","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"},{"role":"user","content":"Name a river near city [river].","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"}],"response":{"role":"assistant","content":"{\"river\":\"river\"}","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"},"output_schema":{"properties":{"river":{"title":"River","type":"string"}},"required":["river"],"title":"KediOutputs","type":"object"},"tools":[],"call_id":"01a234bf-c3a7-7918-8699-a51e4629e3f3"}]',1.79618131242425823216e+09);
INSERT INTO "turns" VALUES('01a234bf-c385-7394-b327-494546f542a9',3,1,'{"adapter":"offline","format":"portable","mcp":"","model":"offline","settings":"44136fa355b3678a","tools":""}',1,0,'01a234bf-c387-7dad-97ad-777b0306396a','old.kedi:5','{"lane":"offline/offline#43262c02","instructions":"Be brief.","prompt":"Say something about river.","history":{"messages":4,"digest":"10efbd38e1774183"},"output_schema":null,"tools":[],"tool_contract":"","settings":{},"origin":"old.kedi:5"}','[{"role":"user","content":"Say something about river.","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"},{"role":"assistant","content":"[offline] Say something about river.","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"}]',NULL,'"[offline] Say something about river."','{"input_tokens":44,"output_tokens":12,"requests":1,"tool_calls":0}','[{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Name a city [city].","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"},{"role":"assistant","content":"{\"city\":\"city\"}","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"},{"role":"user","content":"Name a river near city [river].","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"},{"role":"assistant","content":"{\"river\":\"river\"}","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"},{"role":"user","content":"Say something about river.","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"}],"response":{"role":"assistant","content":"[offline] Say something about river.","runId":"01a234bf-c387-7dad-97ad-777b0306396a","conversationId":"01a234bf-c385-7394-b327-494546f542a9"},"output_schema":null,"tools":[],"call_id":"01a234bf-c3a9-7c5a-a390-94d587e2f86b"}]',1.79618131242548727992e+09);
CREATE INDEX sessions_updated ON sessions (updated);
COMMIT;
