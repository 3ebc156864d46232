-- Issue 14, the write cost of a durable step.
--
-- idx_messages_session_sequence and idx_turns_session_sequence index exactly the columns of the
-- unique constraints messages_session_sequence and turns_session_sequence, whose own indexes serve
-- every read they served (a btree is read backwards as well as forwards). Reference §9.2 principle 3:
-- no redundant indexes. Each message insert wrote one index entry more than it needed (about 100
-- bytes of WAL per message).
DROP INDEX IF EXISTS idx_messages_session_sequence;
DROP INDEX IF EXISTS idx_turns_session_sequence;

-- A turn row is updated about twice per step (the model call counters, then the tokens with the
-- assistant message). Room on its page keeps those updates HOT (no new index entries in the five
-- indexes of turns); new rows then fill pages half way.
ALTER TABLE turns SET (fillfactor = 50);
