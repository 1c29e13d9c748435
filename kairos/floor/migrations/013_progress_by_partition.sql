-- Projection progress is recorded per topic partition ("<topic>:<partition>"), so that
-- projectors sharing the consumer group do not overwrite one another's figures. The one row
-- earlier projectors kept for all of them would hold its last figures for ever.
DELETE FROM projection_progress WHERE source = 'projector';
